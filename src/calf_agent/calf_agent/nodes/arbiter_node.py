"""The arbiter node: forwards one sub-policy's actions from ``candidates`` to ``action``.

Every sub-policy node publishes its actions, tagged with its name in ``Action.source``, on
``candidates`` (the desktop ones through the shim). The arbiter gates on ``observation`` and
forwards the chosen actions unchanged; the decisions are ``calf_agent.arbiter.Arbiter``'s. It runs
beside the env (see ``calf_bringup.graph``). A sub-policy falling silent or coming back is logged.
"""
from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node

from calf_agent.arbiter import Reason, make_arbiter
from calf_agent.hierarchy import Hierarchy, load_hierarchy
from calf_core.envs import make_env
from calf_core.errors import ConfigError, MessageError
from calf_msgs.msg import Action, Observation
from calf_ros.conversions import msg_to_obs
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters, positive_number
from calf_ros.qos import STREAM, QosConfig
from calf_ros.run_params import shared

PARAMETERS: dict[str, tuple[Any, str]] = {
    'hierarchy': ('', 'directory written by calf train-hierarchy (hierarchy.json: sub-policies, gating, timeout)'),
    **shared('time_scale'),
    'qos_reliability': (STREAM.reliability, 'QoS reliability of observation/candidates/action'),
    'qos_durability': (STREAM.durability, 'QoS durability of observation/candidates/action'),
    'qos_depth': (STREAM.depth, 'QoS history depth of observation/candidates/action'),
}


@dataclass(frozen=True)
class ArbiterNodeConfig:
    hierarchy: Hierarchy
    time_scale: float
    qos: QosConfig

    @property
    def timeout_s(self) -> float:
        """Real time after which a silent sub-policy is replaced."""
        return self.hierarchy.silence_timeout_s / self.time_scale

    @classmethod
    def from_node(cls, node: Node) -> ArbiterNodeConfig:
        """Declare every parameter on ``node``, read them once and validate them."""
        p = declare_parameters(node, PARAMETERS, dynamic=('time_scale',))
        if not p['hierarchy']:
            raise ConfigError('no hierarchy given: pass --ros-args -p hierarchy:=DIR (from calf train-hierarchy)')
        qos = QosConfig(p['qos_reliability'], p['qos_durability'], p['qos_depth'])
        qos.profile()
        return cls(load_hierarchy(p['hierarchy']), positive_number('time_scale', p['time_scale']), qos)


class ArbiterNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__('arbiter', **kwargs)
        self.config = cfg = ArbiterNodeConfig.from_node(self)
        h = cfg.hierarchy
        self.arbiter = make_arbiter(h.env, h.sources, cfg.timeout_s, h.gating)
        self.obs_size = int(np.prod(make_env(h.env).observation_space.shape))
        self.decisions: Counter[Reason] = Counter()
        self.rejected = 0
        self._clock = Clock(clock_type=ClockType.STEADY_TIME)
        self._action_pub = self.create_publisher(Action, 'action', cfg.qos.profile())
        self.create_subscription(Observation, 'observation', self._on_observation, cfg.qos.profile())
        self.create_subscription(Action, 'candidates', self._on_candidate, cfg.qos.profile())
        self.get_logger().info(f'{h.env} hierarchy {h.root}: sub-policies {", ".join(h.sources)} (fallback order), '
                               f'gating {h.gating}, silence timeout {cfg.timeout_s * 1e3:g} ms')

    def _now_s(self) -> float:
        return self._clock.now().nanoseconds / 1e9

    def _on_observation(self, msg: Observation) -> None:
        try:
            obs = msg_to_obs(msg, self.obs_size)
        except MessageError as err:
            self.rejected += 1
            self.get_logger().warning(f'rejected observation ({self.rejected} so far): {err}',
                                      throttle_duration_sec=1.0)
            return
        self.arbiter.on_observation(obs)
        self._log_silence(self._now_s())

    def _on_candidate(self, msg: Action) -> None:
        now = self._now_s()
        decision = self.arbiter.on_action(msg.source, msg.episode, msg.obs_seq, now)
        self.decisions[decision.reason] += 1
        if decision.forward:
            self._action_pub.publish(msg)
        elif decision.reason is Reason.UNKNOWN_SOURCE:
            self.get_logger().warning(f'ignored an action from unknown source {msg.source!r}',
                                      throttle_duration_sec=1.0)
        self._log_silence(now)

    def _log_silence(self, now_s: float) -> None:
        for source, silent in self.arbiter.silence_changes(now_s):
            if silent:
                self.get_logger().warning(f'{source} silent for more than {self.config.timeout_s * 1e3:g} ms: '
                                          f'following {self.arbiter.active(now_s)} instead')
            else:
                self.get_logger().info(f'{source} is sending actions')


def main(args: list[str] | None = None) -> int:
    return run_node('arbiter_node', ArbiterNode, args)


if __name__ == '__main__':
    sys.exit(main())
