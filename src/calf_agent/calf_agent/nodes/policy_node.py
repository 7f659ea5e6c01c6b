"""The policy node: answers each observation on ``observation`` with a plan on ``action``.

The decisions are ``calf_agent.policy_runner.PolicyRunner``'s: newest observation only, the
trainer's features, recurrent state per episode. Observations that reach the node together (a stall
releasing, a queue of them) are acted on once, on the newest, as in virtual time: the callback takes what is
already waiting behind its message before it acts, so an older one of a burst is never answered first. ``compute_ms`` in each Action is the time from
the observation's arrival in the callback to the action's publication, on the steady clock. torch is
imported when the node is made, not with this module: ``main`` then loads it after ``run_node`` raised
the process's priority, which on a busy host cut the node's start-up most (torch is most of it).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from rclpy.clock import Clock, ClockType
from rclpy.node import Node

from calf_core.errors import ConfigError, MessageError
from calf_msgs.msg import Action, Observation
from calf_ros.conversions import msg_to_obs, plan_to_msg
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters
from calf_ros.qos import STREAM, QosConfig

PARAMETERS: dict[str, tuple[Any, str]] = {
    'policy': ('', 'checkpoint directory (policy.safetensors and meta.json), as written by calf train'),
    'deterministic': (True, 'take the most likely action; false samples from the policy'),
    'source': ('policy', 'name written into Action.source'),
    'qos_reliability': (STREAM.reliability, 'QoS reliability of observation/action: best_effort or reliable'),
    'qos_durability': (STREAM.durability, 'QoS durability of observation/action: volatile or transient_local'),
    'qos_depth': (1, 'QoS history depth of observation/action; 1 keeps only the newest observation'),
}


@dataclass(frozen=True)
class PolicyNodeConfig:
    policy: str
    deterministic: bool
    source: str
    qos: QosConfig

    @classmethod
    def from_node(cls, node: Node) -> PolicyNodeConfig:
        """Declare every parameter on ``node``, read them once and validate them."""
        p = declare_parameters(node, PARAMETERS)
        if not p['policy']:
            raise ConfigError('no policy given: pass --ros-args -p policy:=CHECKPOINT_DIR')
        qos = QosConfig(p['qos_reliability'], p['qos_durability'], p['qos_depth'])
        qos.profile()
        return cls(p['policy'], p['deterministic'], p['source'], qos)


class PolicyNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__('policy', **kwargs)
        self.config = cfg = PolicyNodeConfig.from_node(self)
        from calf_agent.policy_runner import PolicyRunner  # torch: see the module's docstring

        self.runner = runner = PolicyRunner.from_checkpoint(cfg.policy, cfg.deterministic)
        self.received = self.rejected = self.acted = self.skipped = 0  # skipped: older ones of a burst
        self._clock = Clock(clock_type=ClockType.STEADY_TIME)
        self._action_pub = self.create_publisher(Action, 'action', cfg.qos.profile())
        self._sub = self.create_subscription(Observation, 'observation', self._on_observation, cfg.qos.profile())
        self.get_logger().info(
            f'policy {cfg.policy} ({runner.env or "env not recorded"}): {runner.obs_size} observation values, '
            f'{runner.action_description}, plan horizon {runner.plan_horizon}, '
            f'{"deterministic" if cfg.deterministic else "sampling"}')

    def _on_observation(self, msg: Observation) -> None:
        start_ns = self._clock.now().nanoseconds
        self.received += 1
        msg = self._newest(msg)
        try:
            obs = msg_to_obs(msg, self.runner.obs_size)
        except MessageError as err:
            self.rejected += 1
            self.get_logger().warning(f'rejected observation ({self.rejected} so far): {err}',
                                      throttle_duration_sec=1.0)
            return
        seen = sum(self.runner.anomalies.values())
        plan = self.runner.on_observation(obs)
        if sum(self.runner.anomalies.values()) != seen:
            self.get_logger().warning(f'unexpected observation run {obs.run} episode {obs.episode} (a restarted env, '
                                      f'or another publisher on the domain); so far: {self.runner.anomalies}',
                                      throttle_duration_sec=10.0)
        if plan is None:
            return
        end_ns = self._clock.now().nanoseconds
        self._action_pub.publish(plan_to_msg(obs, plan, self.config.source, (end_ns - start_ns) / 1e6, end_ns))
        self.acted += 1


    def _newest(self, msg: Observation) -> Observation:
        """``msg``, or the newest observation already waiting behind it (same run: the later seq wins)."""
        with self._sub.handle:
            while (waiting := self._sub.handle.take_message(Observation, False)) is not None:
                later = waiting[0]
                self.received += 1
                self.skipped += 1
                if later.run != msg.run or (later.episode, later.seq) > (msg.episode, msg.seq):
                    msg = later
        return msg


def _make_node() -> PolicyNode:
    import torch

    torch.set_num_threads(1)  # more threads do not speed up a small policy; they spin on cores other nodes need
    return PolicyNode()


def main(args: list[str] | None = None) -> int:
    return run_node('policy_node', _make_node, args, realtime=True)


if __name__ == '__main__':
    sys.exit(main())
