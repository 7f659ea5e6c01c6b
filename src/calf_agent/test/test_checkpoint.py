"""Checkpoints round-trip exactly and fail with one-line CheckpointErrors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.policies import Agent, LstmAgent, MlpAgent
from calf_agent.seeding import seed_everything
from calf_core.errors import CalfError

META = {'env': 'cartpole', 'regime': 'full', 'representation': {'frames': 2, 'actions': 1}, 'seed': 3, 'steps': 1000}


def _agents() -> list[Agent]:
    seed_everything(0)
    return [MlpAgent(4, 2), MlpAgent(6, 3, (32,), plan_horizon=4),
            LstmAgent(147, 7, (64,), lstm_size=16)]


@pytest.mark.parametrize('index', range(3), ids=['mlp', 'mlp-plan', 'lstm'])
def test_round_trip_gives_identical_actions(tmp_path: Path, index: int) -> None:
    agent = _agents()[index]
    save_checkpoint(tmp_path, agent, META)
    loaded, meta = load_checkpoint(tmp_path)
    assert type(loaded) is type(agent) and loaded.spec() == agent.spec()
    obs = np.random.default_rng(0).normal(size=(16, agent.obs_dim)).astype(np.float32)
    for deterministic in (True, False):
        torch.manual_seed(1)
        expected, state = agent.act(obs, deterministic=deterministic)
        torch.manual_seed(1)
        got, loaded_state = loaded.act(obs, deterministic=deterministic)
        np.testing.assert_array_equal(got, expected)
        if state is not None:
            torch.testing.assert_close(loaded_state, state, rtol=0, atol=0)
    for key, value in agent.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)


def test_meta_records_spec_versions_and_caller_meta(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, MlpAgent(4, 2), META)
    meta = json.loads((tmp_path / 'meta.json').read_text())
    assert meta['agent'] == {'kind': 'mlp', 'obs_dim': 4, 'n_actions': 2, 'hidden': [64, 64],
                             'plan_horizon': 1}
    assert {k: meta[k] for k in META} == META
    assert set(meta['versions']) == {'python', 'torch', 'gymnasium', 'numpy'}
    assert isinstance(meta['git_revision'], str) and meta['git_revision']
    assert load_checkpoint(tmp_path)[1] == meta


def test_reserved_meta_keys_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match='agent'):
        save_checkpoint(tmp_path, MlpAgent(4, 2), {'agent': 'x'})


BREAKAGES = {
    'missing dir': (lambda p: None, 'no checkpoint at'),
    'missing meta': (lambda p: (p / 'meta.json').unlink(), 'has no meta.json'),
    'missing weights': (lambda p: (p / 'policy.safetensors').unlink(), 'has no policy.safetensors'),
    'bad json': (lambda p: (p / 'meta.json').write_text('{"agent": '), 'not valid JSON'),
    'json list': (lambda p: (p / 'meta.json').write_text('[]'), 'not an object'),
    'corrupt weights': (lambda p: (p / 'policy.safetensors').write_bytes(b'\x00garbage' * 10), 'corrupt'),
    'wrong format': (lambda p: _edit_meta(p, format=2), 'has format 2'),
    'unknown kind': (lambda p: _edit_spec(p, kind='transformer'), 'no valid agent spec'),
    'missing spec key': (lambda p: _edit_spec(p, obs_dim=None), 'no valid agent spec'),
    'shape mismatch': (lambda p: _edit_spec(p, obs_dim=5), 'does not match meta.json'),
    'extra layer': (lambda p: _edit_spec(p, hidden=[64, 64, 64]), 'does not match meta.json'),
}


def _edit_meta(path: Path, **changes: object) -> None:
    """Rewrite top-level meta.json keys."""
    meta = json.loads((path / 'meta.json').read_text())
    (path / 'meta.json').write_text(json.dumps({**meta, **changes}))


def _edit_spec(path: Path, **changes: object) -> None:
    """Rewrite meta.json's agent spec (a value of None deletes the key)."""
    meta = json.loads((path / 'meta.json').read_text())
    for key, value in changes.items():
        if value is None:
            del meta['agent'][key]
        else:
            meta['agent'][key] = value
    (path / 'meta.json').write_text(json.dumps(meta))


@pytest.mark.parametrize('case', BREAKAGES)
def test_broken_checkpoints_raise_one_line_errors(tmp_path: Path, case: str) -> None:
    break_it, message = BREAKAGES[case]
    ckpt = tmp_path / 'run'
    if case != 'missing dir':
        save_checkpoint(ckpt, MlpAgent(4, 2), META)
    break_it(ckpt)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(ckpt)
    text = str(info.value)
    assert '\n' not in text and str(ckpt) in text and 'calf train' in text
    assert isinstance(info.value, CalfError)
