"""Sub-tasks of the hierarchical policy graphs (paper, RQ3): reward and termination wrappers.

Each sub-task is a gymnasium wrapper around ``calf_core.envs.make_env(env)`` that keeps the flat
observation and the action space, and changes only reward, termination and (MiniGrid) the start
state. It sits *inside* ``NetworkedEnv``, so that its reward is earned tick by tick under the
same timing rules as the task's own.

CartPole (observation ``[x, x_dot, theta, theta_dot]``; the pole falling or the cart leaving the
track still ends the episode, so every sub-policy also learns to keep the pole up):

- ``stabilise`` (edge, the fast loop): ``1 - min(|theta| / THETA_LIMIT, 1) / 2 -
  min(|theta_dot| / OMEGA_SCALE, 1) / 2`` per tick.
- ``recenter`` (desktop): ``1 - min(|x| / X_LIMIT, 1) / 2 - min(|x_dot| / V_SCALE, 1) / 2`` per tick.

MiniGrid DoorKey (sparse, MiniGrid's own ``1 - 0.9 step / max_steps`` on the sub-goal):

- ``get_key``: ends with that reward once the agent carries the key.
- ``open_door``: starts with the key in hand; ends with that reward once the door is open.
- ``reach_goal``: starts with the key in hand and the door open; the task's own reward.

Starting ``open_door`` and ``reach_goal`` where the earlier sub-goals are already met is what lets
each sub-policy train on its own part of the task. DoorKey has no fast inner loop like CartPole's:
the short interaction at the door (``open_door``) runs on the edge, the two navigation sub-policies
on the desktop.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from calf_core.envs import make_env
from calf_core.errors import ConfigError

THETA_LIMIT = 0.2095  # rad: CartPole-v1 ends the episode beyond 12 degrees
OMEGA_SCALE = 2.0  # rad/s: angular speed at which stabilise earns nothing for it
X_LIMIT = 2.4  # m: CartPole-v1 ends the episode beyond this cart position
V_SCALE = 2.0  # m/s: cart speed at which recenter earns nothing for it


class Subtask(NamedTuple):
    """One sub-task: where its sub-policy runs by default, and its wrapper."""

    name: str
    placement: str  # 'edge' (co-located with the env) or 'desktop' (across the network)
    wrapper: Callable[[gym.Env], gym.Env]


def stabilise_reward(obs: np.ndarray) -> float:
    """In [0, 1]: high for a small pole angle and angular velocity."""
    return 1.0 - 0.5 * min(abs(obs[2]) / THETA_LIMIT, 1.0) - 0.5 * min(abs(obs[3]) / OMEGA_SCALE, 1.0)


def recenter_reward(obs: np.ndarray) -> float:
    """In [0, 1]: high for the cart near the centre and slow."""
    return 1.0 - 0.5 * min(abs(obs[0]) / X_LIMIT, 1.0) - 0.5 * min(abs(obs[1]) / V_SCALE, 1.0)


class ShapedReward(gym.Wrapper):
    """Replaces the reward of each step by ``reward_of(new observation)``."""

    def __init__(self, env: gym.Env, reward_of: Callable[[np.ndarray], float]) -> None:
        super().__init__(env)
        self.reward_of = reward_of

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, _, terminated, truncated, info = self.env.step(action)
        return obs, float(self.reward_of(np.asarray(obs, dtype=np.float64))), terminated, truncated, info


def _door(env: gym.Env) -> Any:
    """The DoorKey door object."""
    return next(obj for obj in env.unwrapped.grid.grid if obj is not None and obj.type == 'door')


def _carries_key(env: gym.Env) -> bool:
    carrying = env.unwrapped.carrying
    return carrying is not None and carrying.type == 'key'


class _MiniGridSubtask(gym.Wrapper):
    """A DoorKey sub-task on ``make_env('minigrid')``: a prepared start state and a sub-goal."""

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(**kwargs)
        if self.prepare():
            obs = self.env.observation(self.env.unwrapped.gen_obs())  # the flat view of the new state
        return obs, info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not terminated and self.reached():
            return obs, float(self.env.unwrapped._reward()), True, truncated, info
        return obs, float(reward), terminated, truncated, info

    def prepare(self) -> bool:
        """Change the start state; True if it changed."""
        return False

    def reached(self) -> bool:
        """The sub-goal holds (the task's own goal ends the episode by itself)."""
        return False

    def _give_key(self) -> None:
        env = self.env.unwrapped
        key = next(obj for obj in env.grid.grid if obj is not None and obj.type == 'key')
        env.grid.set(*key.cur_pos, None)
        key.cur_pos = np.array([-1, -1])
        env.carrying = key


class GetKey(_MiniGridSubtask):
    def reached(self) -> bool:
        return _carries_key(self.env)


class OpenDoor(_MiniGridSubtask):
    def prepare(self) -> bool:
        self._give_key()
        return True

    def reached(self) -> bool:
        return bool(_door(self.env).is_open)


class ReachGoal(_MiniGridSubtask):
    def prepare(self) -> bool:
        self._give_key()
        door = _door(self.env)
        door.is_locked, door.is_open = False, True
        return True


SUBTASKS: dict[str, tuple[Subtask, ...]] = {
    'cartpole': (
        Subtask('stabilise', 'edge', partial(ShapedReward, reward_of=stabilise_reward)),
        Subtask('recenter', 'desktop', partial(ShapedReward, reward_of=recenter_reward)),
    ),
    'minigrid': (
        Subtask('get_key', 'desktop', GetKey),
        Subtask('open_door', 'edge', OpenDoor),
        Subtask('reach_goal', 'desktop', ReachGoal),
    ),
}
"""Per env, its sub-tasks in the arbiter's fallback order: when the one the gate wants is silent,
the first one still heard drives."""


def subtasks(env: str) -> tuple[Subtask, ...]:
    try:
        return SUBTASKS[env]
    except KeyError:
        raise ConfigError(f'no sub-tasks for env {env!r}: choose one of {", ".join(SUBTASKS)}') from None


def subtask(env: str, name: str) -> Subtask:
    found = {task.name: task for task in subtasks(env)}
    if name not in found:
        raise ConfigError(f'unknown {env} sub-task {name!r}: choose one of {", ".join(found)}')
    return found[name]


def make_subtask_env(env: str, name: str) -> gym.Env:
    """``make_env(env)`` with sub-task ``name``'s reward, termination and start state."""
    return subtask(env, name).wrapper(make_env(env))
