"""The adapter policy node: a trained policy driving an existing robot's standard topics.

It reads observations from the topic and message type named in an adapter file
(``calf_ros.adapters``), asks ``PolicyRunner`` for a plan, and publishes the plan's first action
on the robot's command topic (e.g. ``geometry_msgs/Twist`` on ``/cmd_vel``) through the adapter's
action table, or for a continuous policy straight into the adapter's fields. Robot messages carry no episode or sequence number: every received message is
observation k of one endless episode, numbered in order of arrival.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from rclpy.node import Node

from calf_agent.policy_runner import PolicyRunner
from calf_core.errors import ConfigError, MessageError
from calf_core.timing import ReceivedObservation, first_action
from calf_ros.adapters import AdapterConfig, load_adapter_config, set_fields
from calf_ros.message_types import resolve_type
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters

PARAMETERS: dict[str, tuple[Any, str]] = {
    'policy': ('', 'checkpoint directory (policy.safetensors and meta.json), as written by calf train'),
    'adapter': ('', 'adapter YAML: observation topic/type/fields and action topic/type/table'),
    'deterministic': (True, 'take the most likely action; false samples from the policy'),
}


@dataclass(frozen=True)
class AdapterNodeConfig:
    policy: str
    adapter: AdapterConfig
    deterministic: bool

    @classmethod
    def from_node(cls, node: Node) -> AdapterNodeConfig:
        """Declare every parameter on ``node``, read them once, load the adapter file."""
        p = declare_parameters(node, PARAMETERS)
        for name in ('policy', 'adapter'):
            if not p[name]:
                raise ConfigError(f'no {name} given: pass --ros-args -p policy:=CHECKPOINT_DIR -p adapter:=FILE.yaml')
        return cls(p['policy'], load_adapter_config(p['adapter']), p['deterministic'])


class AdapterPolicyNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__('adapter_policy', **kwargs)
        self.config = cfg = AdapterNodeConfig.from_node(self)
        self.runner = runner = PolicyRunner.from_checkpoint(cfg.policy, cfg.deterministic)
        obs, act = cfg.adapter.observation, cfg.adapter.action
        cfg.adapter.check_sizes(runner.obs_size, runner.n_actions, action_dim=runner.action_dim)
        self._action_type = resolve_type(act.type_name)
        self._action_pub = self.create_publisher(self._action_type, act.topic, act.qos.profile())
        self.create_subscription(resolve_type(obs.type_name), obs.topic, self._on_observation,
                                 obs.qos.profile())
        self.received = self.rejected = self.acted = 0
        self.get_logger().info(f'policy {cfg.policy}: {obs.type_name} on {obs.topic} -> {act.type_name} on '
                               f'{act.topic}, {runner.action_description}')

    def _on_observation(self, msg: Any) -> None:
        seq = self.received
        self.received += 1
        try:
            obs = self.config.adapter.observation.decode(msg, self.runner.obs_size)
        except MessageError as err:
            self.rejected += 1
            self.get_logger().warning(f'rejected observation ({self.rejected} so far): {err}',
                                      throttle_duration_sec=1.0)
            return
        plan = self.runner.on_observation(ReceivedObservation(0, seq, obs))
        if plan is None:
            return
        action = self.config.adapter.action.encode(first_action(plan))
        self._action_pub.publish(set_fields(self._action_type(), action))
        self.acted += 1


def main(args: list[str] | None = None) -> int:
    return run_node('adapter_policy_node', AdapterPolicyNode, args)


if __name__ == '__main__':
    sys.exit(main())
