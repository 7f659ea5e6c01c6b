"""calf_msgs/Action <-> plans: discrete and continuous plans survive the trip, bad ones are one-line errors."""
from __future__ import annotations

import numpy as np
import pytest

from calf_core.errors import MessageError
from calf_msgs.msg import Action
from calf_ros.conversions import ReceivedObservation, msg_to_plan, plan_to_msg

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
