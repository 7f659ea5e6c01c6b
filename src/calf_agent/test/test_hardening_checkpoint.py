"""Adversarial checkpoints (classes 2 and 3): meta.json is checked against its schema before anything
is allocated, and a save is a unit: an interrupted one leaves the previous checkpoint loadable, and a
mixed pair is never loaded."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from calf_agent.checkpoint import WEIGHTS, load_checkpoint, save_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.evaluate import evaluate_sim
from calf_agent.policies import MlpAgent
from calf_agent.policy_runner import PolicyRunner
from calf_core import atomic
from calf_core.profiles import load_profile

META = {'env': 'cartpole', 'regime': 'full', 'representation': {'frames': 1, 'actions': 0}, 'seed': 3}


def edit(path: Path, change: Any) -> None:
    """Apply ``change(meta)`` to meta.json (it returns the new document)."""
    meta = json.loads((path / 'meta.json').read_text())
    (path / 'meta.json').write_text(json.dumps(change(meta)))


def spec(**fields: Any) -> Any:
    return lambda meta: {**meta, 'agent': {**meta['agent'], **fields}}


def top(**fields: Any) -> Any:
    return lambda meta: {**meta, **fields}


def drop(key: str) -> Any:
    return lambda meta: {k: v for k, v in meta.items() if k != key}


BAD_META = {
    'hidden width 10^9': (spec(hidden=[10 ** 9]), r'agent.hidden\[0\] must be in'),
    '3 layers of 16384 (each within bounds, not the weight budget)': (spec(hidden=[16384, 16384, 16384]), 'weights, more than'),
    'obs size 10^8': (spec(obs_dim=10 ** 8), 'agent.obs_dim must be in'),
    'plan horizon 10^7': (spec(plan_horizon=10 ** 7), 'agent.plan_horizon must be in'),
    'plan horizon 0': (spec(plan_horizon=0), 'agent.plan_horizon must be in'),
    'lstm size as a string': (spec(kind='lstm', lstm_size='128'), 'agent.lstm_size must be an integer'),
    'hidden as a dict': (spec(hidden={'a': 1}), 'agent.hidden must be a list'),
    '100 layers': (spec(hidden=[4] * 100), 'agent.hidden must be a list of 1 to'),
    'bool as a size': (spec(obs_dim=True), 'agent.obs_dim must be an integer'),
    'float as a size': (spec(n_actions=2.0), 'agent.n_actions must be an integer'),
    'giant int': (spec(obs_dim=10 ** 4000), 'an integer of'),
    'agent as a list': (top(agent=[1, 2]), 'agent must be an object'),
    'kind missing': (lambda m: {**m, 'agent': {k: v for k, v in m['agent'].items() if k != 'kind'}}, 'agent.kind'),
    'env as a list': (top(env=['cartpole']), 'env must be a non-empty string'),
    'env missing': (drop('env'), "has no 'env'"),
    'representation as a string': (top(representation='raw'), 'representation must be an object'),
    'negative frames': (top(representation={'frames': -1}), 'representation.frames must be in'),
    'frames 10^6': (top(representation={'frames': 10 ** 6}), 'representation.frames must be in'),
    'unknown representation field': (top(representation={'frames': 1, 'colour': 2}), 'unknown fields'),
    'start plan of 10^5 actions': (top(start_plan=[0] * 100_000), 'start_plan must be a list of at most'),
    'empty continuous action in a start plan': (top(start_plan=[[0.0], []]), r'start_plan\[1\] must be a list of 1 to'),
    'text as a continuous action': (top(start_plan=[['0.5']]), r'start_plan\[0\] must be a list of 1 to'),
    'planner hold action as a string': (top(agent={'kind': 'model_plan', 'base': {'kind': 'mlp', 'obs_dim': 4,
                                                                                  'n_actions': 2, 'hidden': [8]},
                                                   'model': {'obs_dim': 4, 'n_actions': 2, 'hidden': [8]},
                                                   'plan_horizon': 4, 'lead': 1, 'start_plan': [0],
                                                   'hold_action': 'zero'}),
                                        'agent.hold_action must be an integer'),
    'negative steps': (top(steps=-5), 'steps must be in'),
    'seed as a float': (top(seed=1.5), 'seed must be an integer'),
    'deep nesting': (top(notes=json.loads('[' * 40 + ']' * 40)), 'nests deeper'),
    'planner base spec too wide': (top(agent={'kind': 'model_plan', 'base': {'kind': 'mlp', 'obs_dim': 4,
                                                                               'n_actions': 2, 'hidden': [10 ** 6]},
                                              'model': {'obs_dim': 4, 'n_actions': 2, 'hidden': [8]},
                                              'plan_horizon': 4, 'lead': 1, 'start_plan': [0]}),
                                   r'agent.base.hidden\[0\] must be in'),
}


@pytest.mark.parametrize('case', BAD_META)
def test_bad_meta_is_one_line_before_any_allocation(tmp_path: Path, case: str) -> None:
    change, message = BAD_META[case]
    save_checkpoint(tmp_path, MlpAgent(4, 2), META)
    edit(tmp_path, change)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(tmp_path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 50_000  # kB
    assert '\n' not in str(info.value) and 'retrain with' in str(info.value)


def test_meta_fields_it_does_not_know_are_kept(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, MlpAgent(4, 2), {**META, 'continuous_actions': 3, 'notes': {'why': 'newer writer'}})
    agent, meta = load_checkpoint(tmp_path)
    assert meta['notes'] == {'why': 'newer writer'} and PolicyRunner(agent, meta).obs_size == 4


@pytest.mark.parametrize('representation', [None, {'frames': 2, 'actions': 0}])
def test_a_representation_that_does_not_fit_the_agent_is_one_line(tmp_path: Path, representation: Any) -> None:
    """An agent trained on 4 stacked CartPole frames (16 inputs) whose meta.json lost its representation."""
    meta = {'env': 'cartpole', **({'representation': representation} if representation else {})}
    save_checkpoint(tmp_path, MlpAgent(16, 2), meta)
    with pytest.raises(CheckpointError, match='the policy reads 16 values') as info:
        evaluate_sim(tmp_path, load_profile('sim_clean'), episodes=1, seed=0)
    assert '\n' not in str(info.value) and 'representation is missing or wrong' in str(info.value)


def test_new_weights_beside_old_meta_are_refused(tmp_path: Path) -> None:
    """The state a save interrupted between its two renames leaves behind."""
    save_checkpoint(tmp_path, MlpAgent(4, 2), META)
    other = tmp_path / 'other'
    save_checkpoint(other, MlpAgent(4, 2), META)  # same shapes, other weights
    atomic.write_bytes(tmp_path / WEIGHTS, (other / WEIGHTS).read_bytes())
    with pytest.raises(CheckpointError, match='not the file meta.json was saved with'):
        load_checkpoint(tmp_path)


def interrupt_at(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make the rename of a file called ``name`` into place raise KeyboardInterrupt (Ctrl-C at that moment)."""
    rename = os.replace

    def interrupted(src: Any, dst: Any) -> None:
        if Path(dst).name == name:
            raise KeyboardInterrupt
        rename(src, dst)
    monkeypatch.setattr(os, 'replace', interrupted)


def weights_of(agent: MlpAgent) -> list[list[float]]:
    return [v.flatten().tolist() for v in agent.state_dict().values()]


@pytest.mark.parametrize('second', ['meta.json', WEIGHTS])
def test_an_interrupted_save_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           second: str, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = MlpAgent(4, 2), MlpAgent(4, 2)
    save_checkpoint(tmp_path, old, {**META, 'seed': 1})
    with monkeypatch.context() as patch:
        interrupt_at(patch, second)
        with pytest.raises(KeyboardInterrupt):
            save_checkpoint(tmp_path, new, {**META, 'seed': 2})
    agent, meta = load_checkpoint(tmp_path)
    assert meta['seed'] == 1 and weights_of(agent) == weights_of(old)
    assert not list(tmp_path.glob('.*.tmp')), 'no temporary file is left behind'
    save_checkpoint(tmp_path, new, {**META, 'seed': 2})
    agent, meta = load_checkpoint(tmp_path)
    assert meta['seed'] == 2 and weights_of(agent) == weights_of(new)
    assert not (tmp_path / '.prev').exists(), 'a whole save leaves one checkpoint'


def test_two_interrupted_saves_keep_the_last_whole_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = MlpAgent(4, 2)
    save_checkpoint(tmp_path, first, {**META, 'seed': 1})
    interrupt_at(monkeypatch, 'meta.json')
    for seed in (2, 3):  # each leaves new weights beside the old meta.json
        with pytest.raises(KeyboardInterrupt):
            save_checkpoint(tmp_path, MlpAgent(4, 2), {**META, 'seed': seed})
    agent, meta = load_checkpoint(tmp_path)
    assert meta['seed'] == 1 and weights_of(agent) == weights_of(first)


SAVER = """
import hashlib, pathlib, sys, torch
from safetensors.torch import save
from calf_agent.checkpoint import save_checkpoint
from calf_agent.policies import MlpAgent
ckpt, log = sys.argv[1], pathlib.Path(sys.argv[2])
i = 0
while True:
    torch.manual_seed(i)
    agent = MlpAgent(4, 2, (256, 256))
    weights = save({k: v.detach().contiguous() for k, v in agent.state_dict().items()})
    (log / str(i)).write_text(hashlib.sha256(weights).hexdigest())  # what save i writes, before it starts
    save_checkpoint(ckpt, agent, {'env': 'cartpole', 'seed': i})
    i += 1
    if i == 2:
        print('saving', flush=True)
"""


@pytest.mark.slow
def test_a_save_killed_at_any_moment_leaves_a_whole_checkpoint(tmp_path: Path) -> None:
    ckpt, log = tmp_path / 'ckpt', tmp_path / 'log'
    log.mkdir()
    loaded = 0
    for round_ in range(4):
        proc = subprocess.Popen([sys.executable, '-c', SAVER, str(ckpt), str(log)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == 'saving'
            time.sleep(0.01 * round_)  # a different moment of the save loop each round
            os.kill(proc.pid, signal.SIGKILL if round_ % 2 else signal.SIGTERM)
        finally:
            proc.wait(timeout=30)
        agent, meta = load_checkpoint(ckpt)  # the last whole save, never a refusal
        assert meta['weights_sha256'] == (log / str(meta['seed'])).read_text(), \
            'the weights loaded are the ones the save that wrote meta.json wrote'
        loaded += 1
    assert loaded == 4


def test_a_save_creates_the_directory_but_not_its_parents(tmp_path: Path) -> None:
    with pytest.raises(Exception, match='does not exist'):
        save_checkpoint(tmp_path / 'no' / 'such' / 'dir', MlpAgent(4, 2), META)
    assert not (tmp_path / 'no').exists()
