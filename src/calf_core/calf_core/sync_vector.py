"""``SyncVectorEnv``: gymnasium's ``SyncVectorEnv`` with a cheaper merge of the envs' infos.

Gymnasium merges each env's ``info`` into the vector's one key at a time, and for every key it checks the
value's type and builds a fresh mask array, even when the first env already made the key's array and mask.
Here a key that the merged info already holds (array and mask both) is written into them directly; the first
env's keys, ``final_obs``, nested dicts and anything new still go through gymnasium's merge. The result is
the same dict of the same arrays, in the same order. The trainers' SyncVectorEnv path
(``calf_agent.regimes.vec_env_factory``) uses it.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym


class SyncVectorEnv(gym.vector.SyncVectorEnv):
    """A ``gymnasium.vector.SyncVectorEnv`` whose ``_add_info`` writes a key already merged in place."""

    def _add_info(self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int) -> dict[str, Any]:
        rest: dict[str, Any] = {}
        for key, value in env_info.items():
            array, mask = vector_infos.get(key), vector_infos.get('_' + key)
            if array is None or mask is None or key == 'final_obs' or isinstance(value, dict):
                rest[key] = value
            else:
                array[env_num] = value
                mask[env_num] = True
        return super()._add_info(vector_infos, rest, env_num) if rest else vector_infos
