"""The policy node acts once on a burst of observations, on the newest, as virtual time does.

A stall that releases, or a queue of observations, hands the node several at once. With a history deeper than
one (qos_depth 5 here) every one of them waits in its reader: the node takes them all when it wakes, and answers
only the newest, where it used to answer each in turn, the oldest first.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import new_context, shut_down, spin_until

from calf_agent.checkpoint import save_checkpoint
from calf_agent.nodes.policy_node import PolicyNode
from calf_agent.policies import MlpAgent
from calf_msgs.msg import Action, Observation

pytestmark = pytest.mark.ros
DEPTH = 5
QOS = QoSProfile(depth=DEPTH, reliability=ReliabilityPolicy.RELIABLE)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    return save_checkpoint(tmp_path / 'cartpole', MlpAgent(4, 2),
                           {'env': 'cartpole', 'representation': {'frames': 1, 'actions': 0}})


class Nodes:
    """The policy node on its own executor, spun only when the test says; a probe on another."""

    def __init__(self, checkpoint: Path) -> None:
        self.context = new_context()
        params = {'policy': str(checkpoint), 'qos_reliability': 'reliable', 'qos_depth': DEPTH}
        self.policy = PolicyNode(context=self.context, namespace='/burst',
                                 parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        self.probe = Node('probe', namespace='/burst', context=self.context)
        self.actions: list[int] = []  # obs_seq of each action
        self.seen: list[int] = []  # seq of each observation the probe's own reader got
        self.obs_pub = self.probe.create_publisher(Observation, 'observation', QOS)
        self.probe.create_subscription(Action, 'action', lambda msg: self.actions.append(msg.obs_seq), QOS)
        self.probe.create_subscription(Observation, 'observation', lambda msg: self.seen.append(msg.seq), QOS)
        self.policy_executor = SingleThreadedExecutor(context=self.context)
        self.policy_executor.add_node(self.policy)
        self.probe_executor = SingleThreadedExecutor(context=self.context)
        self.probe_executor.add_node(self.probe)

    def publish(self, seq: int) -> None:
        self.obs_pub.publish(Observation(seq=seq, episode=0, run=1, data=[0.0, 0.1, 0.0, -0.1], shape=[4]))

    def close(self) -> None:
        self.policy_executor.remove_node(self.policy)
        self.policy.destroy_node()
        shut_down(self.probe_executor, self.context, self.probe)


@pytest.fixture
def nodes(checkpoint: Path) -> Iterator[Nodes]:
    n = Nodes(checkpoint)
    try:
        yield n
    finally:
        n.close()


@pytest.mark.slow
def test_a_burst_is_answered_once_on_its_newest_observation(nodes: Nodes) -> None:
    def both(until: object) -> bool:
        nodes.policy_executor.spin_once(timeout_sec=0.01)
        nodes.probe_executor.spin_once(timeout_sec=0.01)
        return bool(until())

    nodes.publish(0)  # until the path works: discovery
    assert spin_until(nodes.probe_executor, lambda: both(lambda: nodes.actions), 30.0), 'no answer to seq 0'
    for seq in (1, 2, 3):  # a burst, while the policy node does not spin
        nodes.publish(seq)
    assert spin_until(nodes.probe_executor, lambda: nodes.seen[-3:] == [1, 2, 3], 10.0)
    assert spin_until(nodes.probe_executor, lambda: both(lambda: len(nodes.actions) > 1), 10.0), 'no answer'
    spin_until(nodes.probe_executor, lambda: both(lambda: len(nodes.actions) > 2), 0.5)  # any further answer
    assert nodes.actions == [0, 3]
    assert nodes.policy.skipped == 2 and nodes.policy.received == 4
