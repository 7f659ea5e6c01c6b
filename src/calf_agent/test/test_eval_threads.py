"""Evaluation runs its forward passes on one torch thread (more only contend for the cores) and gives
the caller's setting back."""
from __future__ import annotations

from pathlib import Path

import torch
from torch.nn.modules.module import register_module_forward_hook

from calf_agent.checkpoint import save_checkpoint
from calf_agent.evaluate import evaluate_sim
from calf_agent.policies import MlpAgent
from calf_core.profiles import load_profile


def test_evaluation_runs_on_one_torch_thread_and_restores_the_callers(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, MlpAgent(4, 2), {'env': 'cartpole'})
    threads_seen: list[int] = []
    hook = register_module_forward_hook(lambda *_: threads_seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        report = evaluate_sim(tmp_path, load_profile('wifi_degraded'), 4, seed=0)
        after = torch.get_num_threads()
    finally:
        hook.remove()
        torch.set_num_threads(before)
    assert report['episodes'] == 4
    assert threads_seen and set(threads_seen) == {1}
    assert after == 2
