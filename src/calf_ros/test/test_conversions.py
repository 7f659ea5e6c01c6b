"""calf_msgs/Action <-> plans: discrete and continuous plans survive the trip, bad ones are one-line errors;
an Observation reaches a policy as the record virtual time hands it."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from calf_core.errors import MessageError
from calf_core.task_spec import TaskSpec
from calf_core.timing import FeedbackPlan, ReceivedObservation, Stepper
from calf_msgs.msg import Action
from calf_ros.conversions import msg_to_obs, msg_to_plan, obs_to_msg, plan_to_msg

OBS = ReceivedObservation(run=1, episode=2, seq=7, obs=np.zeros(3, np.float32), stamp_ns=0, terminated=False,
                          truncated=False)


def test_a_discrete_plan_round_trips() -> None:
    msg = plan_to_msg(OBS, [1, 0, 1], 'policy', 1.5, 10)
    assert (msg.discrete, list(msg.discrete_plan), list(msg.continuous), msg.continuous_dim) == (1, [1, 0, 1], [], 0)
    assert msg_to_plan(msg, 2).plan == [1, 0, 1]


def test_a_continuous_plan_travels_in_one_message_and_round_trips() -> None:
    plan = [np.array([0.5, -1.0], np.float32), np.array([0.25, 2.0], np.float32)]
    msg = plan_to_msg(OBS, plan, 'policy', 1.5, 10)
    assert (msg.continuous_dim, len(msg.continuous), list(msg.discrete_plan)) == (2, 4, [])
    received = msg_to_plan(msg, 0, (2,))
    assert (received.obs_seq, received.episode) == (7, 2)
    np.testing.assert_array_equal(np.asarray(received.plan), np.asarray(plan))


@pytest.mark.parametrize('values, dim, shape, message', [
    ([0.1, 0.2, 0.3], 2, (2,), 'do not make actions of shape'),
    ([0.1], 1, (2,), 'do not make actions of shape'),
    ([float('nan')], 1, (1,), 'NaN or infinity'),
    ([], 0, (1,), 'no continuous values'),
    ([0.1], 1, (), 'continuous values for an env with discrete actions'),
])
def test_malformed_continuous_actions_are_refused(values: list, dim: int, shape: tuple, message: str) -> None:
    msg = Action(obs_seq=3, continuous=values, continuous_dim=dim)
    with pytest.raises(MessageError, match=message):
        msg_to_plan(msg, 2, shape)


def test_a_feedback_plan_travels_with_its_gains_and_predictions_and_round_trips() -> None:
    actions = np.array([[0.5, -1.0], [0.25, 2.0]], np.float32)
    gains = np.arange(12, dtype=np.float32).reshape(2, 2, 3) / 10
    predicted = np.arange(6, dtype=np.float32).reshape(2, 3)
    msg = plan_to_msg(OBS, FeedbackPlan(actions, gains, predicted), 'planner', 1.5, 10)
    assert (len(msg.continuous), len(msg.feedback_gains), len(msg.feedback_predicted)) == (4, 12, 6)
    received = msg_to_plan(msg, 0, (2,))
    np.testing.assert_array_equal(np.asarray(received.plan), actions)
    np.testing.assert_array_equal(received.feedback.gains, gains)
    np.testing.assert_array_equal(received.feedback.predicted, predicted)
    assert msg_to_plan(plan_to_msg(OBS, list(actions), 'policy', 1.5, 10), 0, (2,)).feedback is None


@pytest.mark.parametrize('gains, predicted, shape, message', [
    ([0.1] * 5, [0.0] * 3, (1,), 'feedback of 5 gains and 3 predicted values does not fit a plan of 1 actions'),
    ([0.1] * 3, [0.0] * 2, (1,), 'does not fit'),  # 3 gains for 2 observation values
    ([0.1, float('nan')], [0.0] * 2, (1,), 'feedback contains NaN or infinity'),
    ([0.1], [], (1,), 'does not fit'),
    ([0.1], [0.0], (), 'feedback for an env with discrete actions'),
])
def test_malformed_feedback_is_refused(gains: list, predicted: list, shape: tuple, message: str) -> None:
    msg = Action(obs_seq=3, feedback_gains=gains, feedback_predicted=predicted)
    if shape:
        msg.continuous, msg.continuous_dim = [0.1], 1
    with pytest.raises(MessageError, match=message):
        msg_to_plan(msg, 2, shape)


def test_a_policy_receives_over_dds_the_record_virtual_time_hands_it() -> None:
    """msg_to_obs(obs_to_msg(record)) is ReceivedObservation.of(record), field for field: what PolicyRunner
    reads is the same in both worlds (placement_sim passes .of, the policy node the message's record)."""
    env = Stepper(gym.make('CartPole-v1'), TaskSpec(name='cartpole', env='CartPole-v1', dt=0.02))
    records = [env.reset(0.0, seed=0)]
    assert env.on_action(0, 0, [1, 0], 0.01).value == 'accepted'
    records += [env.tick(0.02 * k) for k in range(1, 5)]  # the plan's two elements, then held ticks
    for record in records:
        live = msg_to_obs(obs_to_msg(record, round(record.stamp_s * 1e9), run=3), 4)
        sim = ReceivedObservation.of(record, run=3)
        assert live._replace(obs=None) == sim._replace(obs=None)
        np.testing.assert_array_equal(live.obs, sim.obs)
    assert [(r.applied_obs_seq, r.applied_index) for r in map(ReceivedObservation.of, records)] == [
        (-1, -1), (0, 0), (0, 1), (0, -1), (0, -1)]
