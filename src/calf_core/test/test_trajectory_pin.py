"""Seeded wrapped trajectories, pinned: observations, rewards, every info value and the links' draws.

The digests were taken before the per-step work of ``NetworkedEnv`` was optimised; a speed-up must
leave them unchanged. A change of behaviour that is meant (new timing rule, new info key) updates
them in the same commit, saying why. The info keys ``applied_obs_seq`` and ``applied_index`` were added
later; without them the run hashes to the digests pinned before. Keep-newest (of the observations reaching
the agent at one instant it acts on the newest) changed all four: FIFO pile-ups under wifi_normal and
wifi_degraded hand the agent several observations at once 11 to 51 times in each run. Reset's info then
reported ``ticks`` 0 (the ticks before the first decision are the first step's, no longer counted twice),
which changed all four again.
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
     'bb7a986c147ec86e216658b5f300e7a788096a60215c0a0e117020e300136d2f'),
    ('CartPole-v1', 'wifi_degraded', 3,
     '1ff2b77c5ffcc3afca0c44545d41ddabd9f08540d320509ae1c72c63a9fdf403'),
    ('InvertedPendulum-v5', 'wifi_normal', 1,
     '999dab736713c01e9a2ffd3ce6d290d0839de0d5c30d1d40f2f51cb1b57f3009'),
    ('InvertedPendulum-v5', 'wifi_degraded', 2,
     '2445bb1cd1c374ada78c9cd35c933cd95f200951cf1600283b4143fcc9903497'),
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
