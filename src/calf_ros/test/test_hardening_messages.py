"""Oversized and hostile messages (class 1): refused at the edge with a MessageError before the core sees
them, and published counters that cannot overflow their uint64 fields or go negative."""
from __future__ import annotations

import array

import gymnasium as gym
import numpy as np
import pytest

from calf_core.errors import MessageError
from calf_core.limits import MAX_OBS_VALUES, MAX_PLAN_HORIZON, U64_MAX, add_count, saturate
from calf_core.task_spec import TaskSpec
from calf_core.timing import Stepper
from calf_msgs.msg import Action, LinkStats, Observation
from calf_ros.conversions import msg_to_obs, msg_to_plan, obs_to_msg


def action(plan: list[int], discrete: int = 0) -> Action:
    msg = Action(obs_seq=3, episode=0, discrete=discrete)
    msg.discrete_plan = plan
    return msg


@pytest.mark.parametrize('length', [MAX_PLAN_HORIZON + 1, 100_000])
def test_a_plan_longer_than_any_horizon_is_refused(length: int) -> None:
    with pytest.raises(MessageError, match='longer than any plan horizon'):
        msg_to_plan(action([0] * length), 2)


def test_a_plan_at_the_bound_is_accepted() -> None:
    assert len(msg_to_plan(action([1] * MAX_PLAN_HORIZON), 2).plan) == MAX_PLAN_HORIZON


@pytest.mark.parametrize('plan, discrete', [([], -1), ([], 2 ** 62), ([0, -5], 0), ([2 ** 63 - 1], 0)])
def test_out_of_range_actions_are_refused(plan: list[int], discrete: int) -> None:
    with pytest.raises(MessageError, match='is outside 0..1'):
        msg_to_plan(action(plan, discrete), 2)


def observation(data: np.ndarray, shape: list[int]) -> Observation:
    msg = Observation(seq=1, episode=0, run=5)
    msg.data, msg.shape = array.array('f', data.tobytes()), shape  # what rclpy hands a callback
    return msg


@pytest.mark.parametrize('data, shape, message', [
    (np.zeros(MAX_OBS_VALUES + 1, np.float32), [], 'more than any policy reads'),
    (np.zeros(4, np.float32), [1] * 33, 'more than any policy reads'),
    (np.zeros(4, np.float32), [2 ** 31, 2 ** 31, 4, 0], 'does not hold 4 values'),
    (np.zeros(4, np.float32), [2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1], 'does not hold 4 values'),
    (np.array([0, np.nan, 0, 0], np.float32), [4], 'NaN or infinite'),
    (np.array([0, np.inf, 0, 0], np.float32), [4], 'NaN or infinite'),
    (np.zeros(5, np.float32), [5], 'expected 4 values'),
])
def test_hostile_observations_are_refused(data: np.ndarray, shape: list[int], message: str) -> None:
    with pytest.raises(MessageError, match=message):
        msg_to_obs(observation(data, shape), 4)


@pytest.mark.parametrize('applied_obs_seq, applied_index', [(1, 0), (7, 0), (-2, -1), (0, -2),
                                                          (0, MAX_PLAN_HORIZON), (-2 ** 63, 2 ** 31 - 1)])
def test_impossible_applied_actions_are_refused(applied_obs_seq: int, applied_index: int) -> None:
    """Observation 1 can only report the initial action (-1) or the plan answering observation 0."""
    msg = observation(np.zeros(4, np.float32), [4])
    msg.applied_obs_seq, msg.applied_index = applied_obs_seq, applied_index
    with pytest.raises(MessageError, match='not an earlier observation and a plan element'):
        msg_to_obs(msg, 4)


def test_the_applied_action_round_trips_and_is_ignored_on_the_reset_observation() -> None:
    env = Stepper(gym.make('CartPole-v1'), TaskSpec(name='cartpole', env='CartPole-v1', dt=0.02))
    reset = env.reset(0.0, seed=0)
    assert env.on_action(0, 0, [1], 0.01).value == 'accepted'
    first, second = env.tick(0.02), env.tick(0.04)
    received = [msg_to_obs(obs_to_msg(record, 0), 4) for record in (reset, first, second)]
    assert [(r.applied_obs_seq, r.applied_index) for r in received] == [(-1, -1), (0, 0), (0, -1)]  # then held
    stray = obs_to_msg(reset, 0)
    stray.applied_obs_seq, stray.applied_index = 5, 3  # a publisher that fills the fields at reset
    assert msg_to_obs(stray, 4)[-2:] == (-1, -1)


@pytest.mark.parametrize('total, change, expected', [
    (0, 5, 5), (10, -3, 10), (U64_MAX - 1, 5, U64_MAX), (U64_MAX, 2 ** 70, U64_MAX), (7, 0, 7),
    (2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1),
])
def test_running_counts_saturate_and_ignore_negative_changes(total: int, change: int, expected: int) -> None:
    assert add_count(total, change) == expected
    LinkStats(dropped_middleware=add_count(total, change))  # the message field takes it


@pytest.mark.parametrize('value', [-1, -2 ** 70, 2 ** 64, 2 ** 100, 12])
def test_saturated_values_always_fit_a_uint64_field(value: int) -> None:
    LinkStats(received=saturate(value), seq=saturate(value))
