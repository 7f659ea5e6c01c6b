"""The adapter env node: a CALF env that looks like a robot, on standard topics configured by YAML.

It is the env node (same parameters, tick thread, episodes, ``episode_result`` and ``link_stats``)
with standard messages instead of calf_msgs at the edges, as an adapter file
(``calf_ros.adapters``) says: each tick's observation goes out as the adapter's observation
message (``std_msgs/Float32MultiArray``, ``sensor_msgs/JointState`` or ``nav_msgs/Odometry``;
a header is stamped with the node's ROS clock), and each command on the adapter's action topic
(``geometry_msgs/Twist`` or ``std_msgs/Float32MultiArray``) becomes the discrete action of its
nearest table row, or, for a Box env (no table), the continuous action its fields hold. The same adapter file serves ``adapter_policy_node``, so a trained policy
drives this env through the generic shim with no calf_msgs on the way. QoS comes from the
adapter file; the env node's ``qos_*`` parameters do not apply.

A command carries no observation number: it answers the newest observation, so its end-to-end
latency (``link_stats``, ``episode_result``) is measured from that one, a lower bound. A command
with a wrong number of values, a NaN or a value outside the table's range, or a continuous one
outside the env's bounds, is counted (``rejected``) and logged on one line, as over calf_msgs.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.subscription import MessageInfo

from calf_core.errors import ConfigError, MessageError
from calf_core.timing import ObsRecord
from calf_env.env_node import ArrivedAction, EnvNode
from calf_ros.adapters import AdapterConfig, load_adapter_config, set_fields
from calf_ros.arrival import age_s
from calf_ros.message_types import resolve_type
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters

PARAMETERS: dict[str, tuple[Any, str]] = {
    'adapter': ('', 'adapter YAML: observation topic/type/fields and action topic/type/table'),
}


def load_adapter(node: EnvNode) -> AdapterConfig:
    """Declare ``adapter`` on ``node``, load the file, check it against the node's env."""
    path = declare_parameters(node, PARAMETERS)['adapter']
    if not path:
        raise ConfigError('no adapter given: pass --ros-args -p adapter:=FILE.yaml')
    adapter = load_adapter_config(path)
    adapter.check_sizes(int(node.stepper.env.observation_space.shape[0]), node.stepper.n_actions, 'env',
                        action_dim=int(np.prod(node.stepper.action_shape)) if node.stepper.continuous else 0)
    return adapter


class AdapterEnvNode(EnvNode):
    NAME = 'adapter_env'

    def _open_topics(self) -> None:
        """The adapter's observation publisher and command subscription."""
        self.adapter = load_adapter(self)
        obs, act = self.adapter.observation, self.adapter.action
        self._obs_type = resolve_type(obs.type_name)
        self._obs_pub = self.create_publisher(self._obs_type, obs.topic, obs.qos.profile())
        self._action_sub = commands = self.create_subscription(resolve_type(act.type_name), act.topic, self._on_command,
                                            act.qos.profile(),
                                            event_callbacks=SubscriptionEventCallbacks(message_lost=self._on_lost))
        self.get_logger().info(f'{obs.type_name} on {self._obs_pub.topic_name}, {act.type_name} on '
                               f'{commands.topic_name} ({_actions(act.table)})')

    def _publish_observation(self, record: ObsRecord, ns: int) -> None:
        msg = set_fields(self._obs_type(), self.adapter.observation.encode(record.obs))
        if hasattr(msg, 'header'):
            msg.header.stamp = self.get_clock().now().to_msg()
        self._obs_pub.publish(msg)

    def _on_command(self, msg: Any, info: MessageInfo) -> None:
        now = self._now()[1] - age_s(info)  # arrived when DDS received it (calf_ros.arrival)
        self.actions_received += 1
        self.losses.on_message(info)
        try:
            action = self.adapter.action.decode(msg, self.stepper.action_shape)
        except MessageError as err:
            self._reject(err)
            return
        self._apply_action(ArrivedAction(self.stepper.tick_index, self.stepper.episode, (action,), now, ''))


def _actions(table: tuple[tuple[float, ...], ...] | None) -> str:
    return 'continuous actions' if table is None else f'{len(table)} actions'


def main(args: list[str] | None = None) -> int:
    return run_node('adapter_env_node', AdapterEnvNode, args, finished=lambda node: node.finished.is_set(),
                    error=lambda node: node.error)


if __name__ == '__main__':
    sys.exit(main())
