"""Sub-task wrappers: shaped CartPole rewards, DoorKey start states, sub-goals and their rewards."""
from __future__ import annotations

import numpy as np
import pytest

from calf_agent.arbiter import AGENT_CELL, KEY
from calf_agent.subtasks import (
    OMEGA_SCALE,
    SUBTASKS,
    THETA_LIMIT,
    V_SCALE,
    X_LIMIT,
    make_subtask_env,
    recenter_reward,
    stabilise_reward,
    subtask,
)
from calf_core.envs import env_spec
from calf_core.errors import ConfigError

FORWARD = 2  # MiniGrid's move-forward action
MINIGRID_DONE = env_spec('minigrid').noop_action  # `done` does nothing in DoorKey


@pytest.mark.parametrize('obs, stabilise, recenter', [
    ([0.0, 0.0, 0.0, 0.0], 1.0, 1.0),
    ([X_LIMIT / 2, 0.0, THETA_LIMIT / 2, 0.0], 0.75, 0.75),
    ([0.0, V_SCALE, 0.0, OMEGA_SCALE], 0.5, 0.5),
    ([-3.0, -5.0, -1.0, -9.0], 0.0, 0.0),  # each term saturates
])
def test_cartpole_shaped_rewards(obs: list[float], stabilise: float, recenter: float) -> None:
    x = np.array(obs)
    assert stabilise_reward(x) == pytest.approx(stabilise)
    assert recenter_reward(x) == pytest.approx(recenter)


@pytest.mark.parametrize('name', ['stabilise', 'recenter'])
def test_cartpole_subtask_keeps_the_task_dynamics_and_termination(name: str) -> None:
    env, plain = make_subtask_env('cartpole', name), make_subtask_env('cartpole', name).env
    obs, _ = env.reset(seed=3)
    assert np.array_equal(obs, plain.reset(seed=3)[0])
    for step in range(200):  # noqa: B007 (read after the loop)
        obs, reward, terminated, truncated, _ = env.step(1)
        expected = plain.step(1)
        assert np.array_equal(obs, expected[0]) and (terminated, truncated) == expected[2:4]
        assert reward == pytest.approx(env.reward_of(obs.astype(np.float64))) and 0.0 <= reward <= 1.0
        if terminated:
            break
    assert terminated and step < 50  # always pushing right tips the pole over


def carries_key(obs: np.ndarray) -> bool:
    return obs.reshape(7, 7, 3)[AGENT_CELL][0] == KEY


def test_get_key_ends_with_minigrids_reward_once_the_key_is_carried() -> None:
    env = make_subtask_env('minigrid', 'get_key')
    obs, _ = env.reset(seed=0)
    assert not carries_key(obs)
    obs, reward, terminated, _, _ = env.step(MINIGRID_DONE)
    assert (reward, terminated) == (0.0, False)
    env.unwrapped.carrying = next(o for o in env.unwrapped.grid.grid if o is not None and o.type == 'key')
    obs, reward, terminated, _, _ = env.step(MINIGRID_DONE)
    assert terminated and reward == pytest.approx(1 - 0.9 * 2 / env.unwrapped.max_steps)


def test_open_door_starts_with_the_key_and_ends_when_the_door_opens() -> None:
    env = make_subtask_env('minigrid', 'open_door')
    obs, _ = env.reset(seed=1)
    grid = env.unwrapped.grid.grid
    assert carries_key(obs) and not any(o is not None and o.type == 'key' for o in grid)
    door = next(o for o in grid if o is not None and o.type == 'door')
    assert door.is_locked and not door.is_open
    assert env.step(MINIGRID_DONE)[1:3] == (0.0, False)
    door.is_locked, door.is_open = False, True
    _, reward, terminated, _, _ = env.step(MINIGRID_DONE)
    assert terminated and reward == pytest.approx(1 - 0.9 * 2 / env.unwrapped.max_steps)


def test_reach_goal_starts_through_an_open_door_and_keeps_the_task_reward() -> None:
    env = make_subtask_env('minigrid', 'reach_goal')
    obs, _ = env.reset(seed=2)
    door = next(o for o in env.unwrapped.grid.grid if o is not None and o.type == 'door')
    assert carries_key(obs) and door.is_open and not door.is_locked
    goal = env.unwrapped.grid.width - 2, env.unwrapped.grid.height - 2
    env.unwrapped.agent_pos, env.unwrapped.agent_dir = (goal[0] - 1, goal[1]), 0  # facing the goal
    _, reward, terminated, _, _ = env.step(FORWARD)
    assert terminated and reward == pytest.approx(1 - 0.9 / env.unwrapped.max_steps)


def test_lookup() -> None:
    assert [task.name for task in SUBTASKS['minigrid']] == ['get_key', 'open_door', 'reach_goal']
    assert subtask('cartpole', 'stabilise').placement == 'edge'
    with pytest.raises(ConfigError, match="unknown cartpole sub-task 'balance': choose one of stabilise, recenter"):
        make_subtask_env('cartpole', 'balance')
    with pytest.raises(ConfigError, match="no sub-tasks for env 'pong'"):
        subtask('pong', 'x')
