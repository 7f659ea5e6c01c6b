"""calf_core.sync_vector.SyncVectorEnv merges infos exactly as gymnasium's SyncVectorEnv does."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import calf_core
from calf_core.sync_vector import SyncVectorEnv


class ChangingInfos(gym.Env):
    """An env whose info keys come and go, change type, nest dicts and start with '_'."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, index: int) -> None:
        self.index, self.t = index, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {'start': self.index}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        k = self.t + self.index
        info: dict[str, Any] = {'count': k, 'level': float(k) if k % 3 else k, 'vector': np.full(2, k, np.int16)}
        if k % 2:
            info['odd'] = (k, 'odd')
            info['nested'] = {'depth': k, 'inner': {'flag': bool(k % 4)}}
        if k % 5 == 0:
            info['_count'] = -k
            info['rare'] = np.float32(k)
        obs = np.full(2, (k % 7) / 7, np.float32)
        return obs, float(action), k % 11 == 0, False, info


def assert_same_infos(ours: Any, theirs: Any, where: str = 'info') -> None:
    """Equal dicts (keys in the same order) of arrays of the same dtypes and values, recursively."""
    assert type(ours) is type(theirs), where
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for key in theirs:
            assert_same_infos(ours[key], theirs[key], f'{where}[{key!r}]')
    elif isinstance(theirs, np.ndarray):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, where
        if theirs.dtype == object:
            for i, value in enumerate(theirs):
                assert_same_infos(ours[i], value, f'{where}[{i}]')
        else:
            np.testing.assert_array_equal(ours, theirs, err_msg=where)
    else:
        assert ours == theirs or (ours != ours and theirs != theirs), where


def run_both(make: Any, n: int, steps: int, mode: gym.vector.AutoresetMode) -> int:
    """Step ours and gymnasium's side by side; return how many steps reported a final observation."""
    envs = [cls([make(i) for i in range(n)], autoreset_mode=mode) for cls in (SyncVectorEnv, gym.vector.SyncVectorEnv)]
    results = [env.reset(seed=3) for env in envs]
    assert_same_infos(results[0][1], results[1][1], 'reset info')
    actions = np.random.default_rng(0).integers(0, envs[0].single_action_space.n, (steps, n))
    finals = 0
    for step in range(steps):
        ours, theirs = (env.step(actions[step]) for env in envs)
        for a, b in zip(ours[:4], theirs[:4]):
            np.testing.assert_array_equal(a, b)
        assert_same_infos(ours[4], theirs[4], f'step {step}')
        finals += 'final_obs' in theirs[4]
    return finals


@pytest.mark.parametrize('mode', [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP])
def test_changing_infos_merge_as_gymnasium_merges_them(mode: gym.vector.AutoresetMode) -> None:
    finals = run_both(lambda i: lambda: ChangingInfos(i), 4, 60, mode)
    assert finals > 0 if mode is gym.vector.AutoresetMode.SAME_STEP else finals == 0


def test_networked_env_infos_merge_as_gymnasium_merges_them() -> None:
    def make(i: int) -> Any:
        return lambda: calf_core.wrap('CartPole-v1', network='wifi_degraded', seed=i)
    assert run_both(make, 4, 150, gym.vector.AutoresetMode.SAME_STEP) > 0  # episodes ended: final_info merged too
