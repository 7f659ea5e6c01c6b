"""Seeded wrapped trajectories, pinned: observations, rewards, every info value and the links' draws.

The digests were taken before the per-step work of ``NetworkedEnv`` was optimised; a speed-up must
leave them unchanged. A change of behaviour that is meant (new timing rule, new info key) updates
them in the same commit, saying why. The info keys ``applied_obs_seq`` and ``applied_index`` were added
later; without them the run hashes to the digests pinned before. Keep-newest (of the observations reaching
the agent at one instant it acts on the newest) changed all four: FIFO pile-ups under wifi_normal and
wifi_degraded hand the agent several observations at once 11 to 51 times in each run.
"""
from __future__ import annotations

import copy
import hashlib
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import calf_core


def _feed(digest: Any, value: Any) -> None:
    """Hash ``value`` exactly: arrays by dtype, shape and bytes; containers element by element."""
    if isinstance(value, np.ndarray):
        digest.update(f'{value.dtype}{value.shape}'.encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for key in sorted(value):
            digest.update(f'{key}:'.encode())
            _feed(digest, value[key])
    elif isinstance(value, (tuple, list)):
        digest.update(f'{type(value).__name__}{len(value)}'.encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f'{type(value).__name__}={value!r};'.encode())


def trajectory_digest(env_id: str, network: str, plan_horizon: int, steps: int) -> str:
    """sha256 of a seeded run of ``steps`` wrapped steps (resets included) with seeded random actions."""
    env = calf_core.wrap(gym.make(env_id), network=network, seed=3, plan_horizon=plan_horizon)
    env.action_space.seed(5)
    digest = hashlib.sha256()
    obs, info = env.reset(seed=7)
    _feed(digest, (obs, info))
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        _feed(digest, (obs, reward, terminated, truncated, info))
        if terminated or truncated:
            obs, info = env.reset()
            _feed(digest, (obs, info))
    for link in (env.uplink, env.downlink):
        _feed(digest, (vars(link.stats), link._rng.bit_generator.state['state']))
    return digest.hexdigest()


@pytest.mark.parametrize('env_id, network, plan_horizon, expected', [
    ('CartPole-v1', 'wifi_normal', 1,
     '1870f53ce94ce4c7300fdd7b299312e7621ad0da3c548848904f17ea8ce922df'),
    ('CartPole-v1', 'wifi_degraded', 3,
     '48eeaaa34fd4816aa7648b8ac39385059403cb96a5d52dbeb9acbd895293c63d'),
    ('InvertedPendulum-v5', 'wifi_normal', 1,
     'c8dcb23bbb8202cfb6a57058bb54cbea406d075efafaf2c6f3cdb7c154c166ff'),
    ('InvertedPendulum-v5', 'wifi_degraded', 2,
     '78020b81f5eb30f49fe4d21df79a45c45f7d8ae32273c209b6de29023a7c2f8f'),
])
def test_seeded_trajectory_is_pinned(env_id: str, network: str, plan_horizon: int, expected: str) -> None:
    if env_id.startswith('Inverted'):
        pytest.importorskip('mujoco')
    assert trajectory_digest(env_id, network, plan_horizon, 600) == expected


def test_a_deep_copied_or_pickled_info_is_equal_and_independent() -> None:
    env = calf_core.wrap(gym.make('CartPole-v1'), network='wifi_degraded', seed=0, plan_horizon=2)
    env.reset(seed=0)
    _, _, _, _, info = env.step(env.action_space.sample())
    info['nested'] = {'list': [1.0]}  # a wrapper may add mutable values (Monitor adds info['episode'])
    copied = copy.deepcopy(info)
    for twin in (copied, pickle.loads(pickle.dumps(info))):  # SubprocVecEnv pickles infos
        assert type(twin) is type(info) and twin.keys() == info.keys()
        assert sorted((k, repr(v)) for k, v in twin.items()) == sorted((k, repr(v)) for k, v in info.items())
    copied['executed'][0, 0] ^= 1
    copied['nested']['list'].append(2.0)
    assert info['executed'][0, 0] != copied['executed'][0, 0]
    assert info['nested'] == {'list': [1.0]}
