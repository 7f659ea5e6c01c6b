"""evaluate_sim builds all its envs' features at once: the policy sees what a HistoryWrapper per env would give it."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.evaluate import evaluate_sim
from calf_agent.policies import MlpAgent
from calf_agent.representation import HistoryWrapper, Representation
from calf_core.envs import make_networked_env
from calf_core.profiles import Profile, load_profile

REP = Representation(frames=3, actions=2, obs_age=True, delay_state=True, history_element=1)
FEATURES = REP.feature_size(4, 2)


@contextmanager
def policy_inputs() -> Iterator[list[np.ndarray]]:
    """The feature batches the policy's first layer receives while the context is open."""
    seen: list[np.ndarray] = []

    def record(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        if isinstance(module, nn.Linear) and inputs[0].shape[-1] == FEATURES:
            seen.append(inputs[0].numpy().copy())
    hook = register_module_forward_pre_hook(record)
    try:
        yield seen
    finally:
        hook.remove()


def wrapper_per_env_run(policy_dir: Path, profile: Profile, episodes: int, seed: int,
                        batch: int) -> tuple[list[float], list[np.ndarray]]:
    """evaluate_sim's schedule (``batch`` envs in lock-step, each restarting with the next episode's seed as it
    finishes), each env's features from its own HistoryWrapper: the returns, and each tick's rows of the envs
    playing (False where an env has finished)."""
    agent, meta = load_checkpoint(policy_dir)
    horizon = meta['plan_horizon']
    envs = [HistoryWrapper(make_networked_env('cartpole', profile, seed=seed + i, plan_horizon=horizon), REP)
            for i in range(batch)]
    features: list[np.ndarray | None] = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    started, returns, playing_rows = batch, [], []
    while any(f is not None for f in features):
        playing_rows.append(np.array([f is not None for f in features]))
        plans, _ = agent.act(np.stack([f if f is not None else np.zeros(FEATURES, np.float32) for f in features]),
                             None, deterministic=True)
        for i in np.flatnonzero(playing_rows[-1]):
            features[i], _, terminated, truncated, _ = envs[i].step(plans[i])
            if terminated or truncated:
                returns.append(envs[i].env.stepper.finish().episode_return)
                features[i] = None
                if started < episodes:
                    features[i] = envs[i].reset(seed=seed + started)[0]
                    started += 1
    return returns, playing_rows


def run(make: Callable[[], Any]) -> tuple[Any, list[np.ndarray]]:
    """``make()``'s result and the policy inputs seen while it ran."""
    with policy_inputs() as seen:
        result = make()
    return result, seen


def test_evaluation_feeds_the_policy_what_a_history_wrapper_per_env_would(tmp_path: Path) -> None:
    torch.manual_seed(0)
    horizon = 2
    agent = MlpAgent(FEATURES, 2, plan_horizon=horizon)
    with torch.no_grad():  # large random weights: every feature moves the actions
        for parameter in agent.parameters():
            parameter.normal_(0.0, 1.0)
    save_checkpoint(tmp_path, agent, {'env': 'cartpole', 'representation': REP.as_dict(), 'plan_horizon': horizon})
    profile = load_profile('wifi_degraded')
    report, inputs = run(lambda: evaluate_sim(tmp_path, profile, episodes=7, seed=3, batch=3))
    (returns, playing), reference_inputs = run(lambda: wrapper_per_env_run(tmp_path, profile, 7, 3, 3))
    assert report['episodes'] == 7 and len(set(report['returns'])) > 1
    assert report['returns'] == returns
    assert len(inputs) == len(reference_inputs) == len(playing)
    for ours, theirs, rows in zip(inputs, reference_inputs, playing):
        np.testing.assert_array_equal(ours[rows], theirs[rows])
