"""The adapter env node in-process over DDS: CartPole on JointState and Twist, driven through the generic shim.

The policy is a hand-set CartPole controller saved as an MlpAgent checkpoint, so that the returns
show whether the adapters map observations and actions the right way round: the controller keeps
the pole up for the whole episode; with the action table reversed it falls within about ten
ticks. Runs use time_scale 2 (a CartPole tick every 10 ms), the one through the shim time_scale 1; under
load the controller, acting on a late observation now and then, may still drop the pole in some episodes.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from geometry_msgs.msg import Twist
from host_load import skip_if_busy, skip_if_missed
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_helpers import new_context, shut_down, spin_until
from sensor_msgs.msg import JointState

from calf_agent.checkpoint import save_checkpoint
from calf_agent.gaussian import GaussianAgent
from calf_agent.nodes.adapter_policy_node import AdapterPolicyNode
from calf_agent.policies import MlpAgent
from calf_core.bags import read_trace_bag
from calf_core.errors import ConfigError
from calf_core.timing import Verdict
from calf_env.adapter_env_node import AdapterEnvNode
from calf_msgs.msg import EpisodeResult
from calf_ros.qos import RESULTS
from calf_shim.generic_shim_node import GenericShimNode

pytestmark = pytest.mark.ros
SCALE = 2.0  # 10 ms ticks: the in-process graph keeps up on a loaded 2-core machine
PENDULUM_SCALE = 4.0  # InvertedPendulum-v5's 40 ms: 10 ms ticks (at 5 ms the in-process graph fell behind, idle)
OBSERVATION = {'topic': '/ae/joint_states', 'type': 'sensor_msgs/msg/JointState',
               'joints': ['cart_slider', 'pole_hinge'], 'fields': ['position', 'velocity']}
ACTION = {'topic': '/ae/cmd_vel', 'type': 'geometry_msgs/msg/Twist', 'fields': ['linear.x'],
          'table': [[-0.5], [0.5]]}


def controller_checkpoint(path: Path) -> Path:
    """Push right when 0.1 x + 0.5 x' + theta + theta' > 0: balances CartPole for 500 ticks, also one tick late."""
    agent = MlpAgent(4, 2, hidden=(1,))
    with torch.no_grad():
        trunk, head = agent.actor[0][0], agent.actor[1]
        trunk.weight.copy_(torch.tensor([[0.1, 0.5, 1.0, 1.0]]))
        head.weight.copy_(torch.tensor([[-1.0], [1.0]]))
        trunk.bias.zero_()
        head.bias.zero_()
    return save_checkpoint(path, agent, {'env': 'cartpole', 'representation': {'frames': 1, 'actions': 0}})


def pendulum_checkpoint(path: Path, sign: float = 1.0) -> Path:
    """A Gaussian policy for InvertedPendulum-v5 whose mean torque is 3 tanh(x + 10 theta + x' + theta'): it
    balances for all 1000 ticks; with ``sign`` -1 the pole falls within about five ticks."""
    agent = GaussianAgent(4, 1, [-3.0], [3.0], hidden=(1,))
    with torch.no_grad():
        trunk, head = agent.actor_mean[0][0], agent.actor_mean[1]
        trunk.weight.copy_(torch.tensor([[1.0, 10.0, 1.0, 1.0]]))
        head.weight.copy_(torch.tensor([[3.0 * sign]]))
        trunk.bias.zero_()
        head.bias.zero_()
    return save_checkpoint(path, agent, {'env': 'InvertedPendulum-v5', 'representation': {'frames': 1, 'actions': 0}})


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def write_adapter(tmp_path: Path, action: dict = ACTION) -> Path:
    return write_yaml(tmp_path / 'adapter.yaml', f'observation: {OBSERVATION}\naction: {action}\n')


class Stack:
    """A private context and executor holding in-process nodes, and the episode results of /ae."""

    def __init__(self) -> None:
        self.context = new_context()
        self.executor = SingleThreadedExecutor(context=self.context)
        self.probe = self.add(Node('probe', namespace='/ae', context=self.context))
        self.results: list[EpisodeResult] = []
        self.probe.create_subscription(EpisodeResult, 'episode_result', self.results.append, RESULTS)

    def add(self, node: Node) -> Any:
        self.executor.add_node(node)
        return node

    def env(self, adapter: Path, *remaps: str, **params: Any) -> AdapterEnvNode:
        params = {'adapter': str(adapter), 'time_scale': SCALE, 'stats_period_s': 0.2, **params}
        return self.add(AdapterEnvNode(namespace='/ae', context=self.context, cli_args=_remaps(remaps),
                                       parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]))

    def close(self) -> None:
        shut_down(self.executor, self.context, *self.executor.get_nodes())


def _remaps(remaps: tuple[str, ...]) -> list[str]:
    return ['--ros-args', *[arg for rule in remaps for arg in ('-r', rule)]] if remaps else []


@pytest.fixture
def stack() -> Iterator[Stack]:
    s = Stack()
    try:
        yield s
    finally:
        s.close()


@pytest.mark.slow
def test_a_trained_policy_drives_the_adapter_env_through_the_generic_shim(stack: Stack, tmp_path: Path) -> None:
    """env -> /ae/joint_states_raw -> shim -> /ae/joint_states -> policy -> /ae/cmd_vel_raw -> shim -> /ae/cmd_vel.

    Both nodes read one adapter file; each sender is remapped onto the shim's input, as for a real
    robot. The shim records the link's trace on the way. At time scale 1 (20 ms ticks): at 10 ms, a busy CI host
    delivered a third of the commands two ticks late and the pole fell within 100 ticks in every episode."""
    adapter = write_adapter(tmp_path)
    profile = write_yaml(tmp_path / 'lan.yaml', "reorder: false\nuplink: [{model: fixed_delay, latency_ms: 5.0}]\n"
                                                "downlink: same\n")
    relay = write_yaml(tmp_path / 'relay.yaml', f"""\
- {{in_topic: /ae/joint_states_raw, out_topic: /ae/joint_states, type: sensor_msgs/msg/JointState,
   direction: uplink, profile: {profile.name}, qos: {{reliability: best_effort, depth: 1}}}}
- {{in_topic: /ae/cmd_vel_raw, out_topic: /ae/cmd_vel, type: geometry_msgs/msg/Twist,
   direction: downlink, profile: {profile.name}, qos: {{reliability: reliable, depth: 10}}}}
""")
    ckpt = controller_checkpoint(tmp_path / 'ckpt')
    shim = stack.add(GenericShimNode(context=stack.context, parameter_overrides=[
        Parameter('config', value=str(relay)), Parameter('time_scale', value=1.0),
        Parameter('trace_bag', value=str(tmp_path / 'link'))]))
    policy = stack.add(AdapterPolicyNode(context=stack.context, cli_args=_remaps(('/ae/cmd_vel:=/ae/cmd_vel_raw',)),
                                         parameter_overrides=[Parameter('policy', value=str(ckpt)),
                                                              Parameter('adapter', value=str(adapter))]))
    env = stack.env(adapter, '/ae/joint_states:=/ae/joint_states_raw', episodes=3, time_scale=1.0)
    assert spin_until(stack.executor, lambda: len(stack.results) == 3, 90.0), f'{len(stack.results)} episodes'
    assert env.finished.wait(5.0) and env.error is None
    returns = [r.episode_return for r in stack.results]
    assert sum(returns) >= 150.0, returns  # reversed actions: about 10 per episode; on time, 500 each
    assert policy.rejected == env.rejected == 0
    assert env.verdicts[Verdict.ACCEPTED] >= sum(returns) / 2  # most ticks got a fresh command
    stack.executor.remove_node(shim)
    shim.destroy_node()
    trace = read_trace_bag(tmp_path / 'link')
    for direction in (trace.uplink, trace.downlink):  # in model time: the profile's 5 ms at any time_scale
        assert len(direction) >= sum(returns) / 2 and not direction.lost.any()
        assert np.median(direction.delays_ms) == pytest.approx(5.0, abs=0.05) and direction.delays_ms.min() > 4.95


def test_bad_commands_are_counted_and_the_env_keeps_ticking(stack: Stack, tmp_path: Path) -> None:
    env = stack.env(write_adapter(tmp_path))
    states: list[JointState] = []
    stack.probe.create_subscription(JointState, '/ae/joint_states', states.append, qos_profile_sensor_data)
    commands = stack.probe.create_publisher(Twist, '/ae/cmd_vel', 10)
    assert spin_until(stack.executor, lambda: len(states) >= 3, 10.0)
    assert list(states[-1].name) == OBSERVATION['joints'] and len(states[-1].position) == 2
    assert states[-1].header.stamp.sec > 0
    bad = [Twist(), Twist(), Twist()]
    bad[0].linear.x, bad[1].linear.x, bad[2].linear.x = float('nan'), 3.0, 0.4  # NaN, out of range, fine
    for msg in bad:
        commands.publish(msg)
    assert spin_until(stack.executor, lambda: env.rejected == 2 and env.actions_received == 3, 10.0)
    ticks = len(states)
    assert spin_until(stack.executor, lambda: len(states) >= ticks + 5, 10.0)  # still ticking


def test_an_adapter_that_does_not_fit_the_env_is_a_config_error(stack: Stack, tmp_path: Path) -> None:
    adapter = write_adapter(tmp_path, {**ACTION, 'table': [[-0.5], [0.0], [0.5]]})
    with pytest.raises(ConfigError, match='the env has 2 discrete actions: the adapter action table needs 2 rows, '
                                          'it has 3'):
        stack.env(adapter)


@pytest.mark.slow
@pytest.mark.parametrize(('sign', 'balanced'), [(1.0, True), (-1.0, False)])
def test_a_continuous_policy_drives_the_adapter_env_through_twist(stack: Stack, tmp_path: Path, sign: float,
                                                                  balanced: bool) -> None:
    """InvertedPendulum-v5 (Box torque): the policy writes its torque into Twist linear.x, the env reads it back
    as its continuous action. The hand-set controller balances for the whole episode, its mirror image does not:
    the torque arrives with its sign and size."""
    if balanced:  # 1000 ticks of 10 ms, each needing its torque in time: a timing verdict
        skip_if_busy(0.04 / PENDULUM_SCALE, realtime=False)  # the nodes run in this process, at its priority
    adapter = write_yaml(tmp_path / 'adapter.yaml', """\
observation: {topic: /ae/state, type: std_msgs/msg/Float32MultiArray}
action: {topic: /ae/cmd_vel, type: geometry_msgs/msg/Twist, fields: [linear.x]}
""")
    policy = stack.add(AdapterPolicyNode(context=stack.context, parameter_overrides=[
        Parameter('policy', value=str(pendulum_checkpoint(tmp_path / 'ckpt', sign))),
        Parameter('adapter', value=str(adapter))]))
    env = stack.env(adapter, env='InvertedPendulum-v5', episodes=1, time_scale=PENDULUM_SCALE)
    assert spin_until(stack.executor, lambda: len(stack.results) == 1, 60.0), 'no episode'
    assert env.finished.wait(5.0) and env.error is None
    result = stack.results[0]
    assert policy.rejected == env.rejected == result.rejected == 0
    if balanced:  # under load a command may come a tick late (hold zero: no torque that tick); the pole holds
        skip_if_missed(env.missed_ticks, env.ticks)  # unless the host stalled the ticks themselves
        assert result.episode_return == 1000.0 and env.verdicts[Verdict.ACCEPTED] >= 500
    else:
        assert result.episode_return < 20.0
