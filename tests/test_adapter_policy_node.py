"""The adapter policy node in-process over DDS: a checkpoint drives Twist commands from JointState messages,
through the action table (discrete) or straight into the fields (continuous)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from geometry_msgs.msg import Twist
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_helpers import new_context, spin_until
from sensor_msgs.msg import JointState

from calf_agent.checkpoint import save_checkpoint
from calf_agent.gaussian import GaussianAgent
from calf_agent.nodes.adapter_policy_node import AdapterPolicyNode
from calf_agent.policies import MlpAgent
from calf_core.errors import ConfigError

pytestmark = pytest.mark.ros

JOINTS = {'topic': '/ad/joint_states', 'type': 'sensor_msgs/msg/JointState', 'joints': ['cart', 'pole'],
          'fields': ['position', 'velocity']}
TWIST_TABLE = {'topic': '/ad/cmd_vel', 'type': 'geometry_msgs/msg/Twist', 'fields': ['linear.x', 'angular.z'],
               'table': [[-0.5, 0.0], [0.5, 0.1]]}


def write_adapter(tmp_path: Path, observation: dict, action: dict) -> Path:
    path = tmp_path / 'adapter.yaml'
    path.write_text(f'observation: {observation}\naction: {action}\n')
    return path


def drive(ckpt: Path, adapter: Path, prefix: str) -> tuple[AdapterPolicyNode, list[Twist]]:
    """Run an adapter policy node on ``ckpt`` in-process while a robot node publishes one JointState on
    ``prefix/joint_states`` every 50 ms; return the node and the first Twists it sent on ``prefix/cmd_vel``."""
    context = new_context()
    executor = SingleThreadedExecutor(context=context)
    robot = Node('robot', context=context)
    executor.add_node(robot)
    received: list[Twist] = []
    try:
        policy = AdapterPolicyNode(context=context, parameter_overrides=[
            Parameter('policy', value=str(ckpt)), Parameter('adapter', value=str(adapter))])
        executor.add_node(policy)
        states = robot.create_publisher(JointState, f'{prefix}/joint_states', 10)
        robot.create_subscription(Twist, f'{prefix}/cmd_vel', received.append, 10)
        msg = JointState(name=['cart', 'pole'], position=[0.01, 0.03], velocity=[-0.02, 0.04])
        timer = robot.create_timer(0.05, lambda: states.publish(msg))
        assert spin_until(executor, lambda: len(received) >= 3, 10.0)
        robot.destroy_timer(timer)
        return policy, received
    finally:
        for node in executor.get_nodes():
            executor.remove_node(node)
            node.destroy_node()
        executor.shutdown()
        context.try_shutdown()


OBSERVATION = np.float32([0.01, -0.02, 0.03, 0.04])  # the JointState drive() publishes, as the policy sees it


def test_adapter_policy_node_drives_twist_from_joint_states(tmp_path: Path) -> None:
    torch.manual_seed(0)
    agent = MlpAgent(4, 2)
    ckpt = save_checkpoint(tmp_path / 'ckpt', agent, {'env': 'cartpole'})
    policy, received = drive(ckpt, write_adapter(tmp_path, JOINTS, TWIST_TABLE), '/ad')
    expected = int(agent.act(OBSERVATION, deterministic=True)[0][0])
    row = TWIST_TABLE['table'][expected]
    assert (received[0].linear.x, received[0].angular.z) == pytest.approx(row)
    assert policy.rejected == 0 and policy.acted >= 3


def test_a_continuous_policy_writes_its_clipped_action_into_twist_fields(tmp_path: Path) -> None:
    torch.manual_seed(0)
    agent = GaussianAgent(4, 2, [-0.2, -1.0], [0.2, 1.0], hidden=(8,))
    with torch.no_grad():
        agent.actor_mean[-1].bias.copy_(torch.tensor([5.0, 0.3]))  # the first value is clipped to 0.2
    agent.obs_norm.update(np.float32([[0.0, 0.0, 0.0, 0.0], [0.1, 0.1, 0.1, 0.1]]))
    ckpt = save_checkpoint(tmp_path / 'ckpt', agent, {'env': 'InvertedPendulum-v5'})
    twist = {'topic': '/adc/cmd_vel', 'type': 'geometry_msgs/msg/Twist', 'fields': ['linear.x', 'angular.z']}
    adapter = write_adapter(tmp_path, {**JOINTS, 'topic': '/adc/joint_states'}, twist)
    policy, received = drive(ckpt, adapter, '/adc')
    expected = agent.act(OBSERVATION, deterministic=True)[0][0]
    assert expected[0] == pytest.approx(0.2) and -1.0 < expected[1] < 1.0
    assert (received[0].linear.x, received[0].angular.z) == pytest.approx(tuple(expected))
    assert received[0].linear.y == 0.0 and policy.rejected == 0


def test_a_continuous_policy_refuses_an_action_table(tmp_path: Path) -> None:
    ckpt = save_checkpoint(tmp_path / 'ckpt', GaussianAgent(4, 2, [-1.0, -1.0], [1.0, 1.0]), {'env': 'x'})
    adapter = write_adapter(tmp_path, JOINTS, TWIST_TABLE)
    context = new_context()
    try:
        with pytest.raises(ConfigError, match='continuous actions of 2 values: the adapter action needs no table'):
            AdapterPolicyNode(context=context, parameter_overrides=[
                Parameter('policy', value=str(ckpt)), Parameter('adapter', value=str(adapter))])
    finally:
        context.try_shutdown()
