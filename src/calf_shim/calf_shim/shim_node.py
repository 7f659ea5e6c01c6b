"""The shim node: relays observations (edge -> desktop) and actions (desktop -> edge) through network models.

Two lanes of `calf_shim.shim_base.ShimBase`, one per direction, with the uplink and downlink of
one profile; the release thread publishes the bytes unchanged at their release times. The
`network` parameter can be changed at runtime; every other parameter is read-only.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter

from calf_core.errors import CalfError, ConfigError
from calf_core.network import resolve_network
from calf_msgs.msg import Action, LinkStats, Observation
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters
from calf_ros.qos import STREAM, QosConfig
from calf_ros.run_params import shared
from calf_shim.relay import DEFAULT_CAPACITY_BYTES, Relay
from calf_shim.runtime_network import check_runtime_network
from calf_shim.seq_gaps import GapEstimator, read_observation_ids
from calf_shim.shim_base import Lane, ShimBase

UPLINK, DOWNLINK = 0, 1  # indices of the two directions' lanes

PARAMETERS: dict[str, tuple[Any, str]] = {
    'network': ('sim_clean', 'network profile name (calf_bringup/config) or path to a profile YAML; '
                'may be changed at runtime'),
    'profile_dir': ('', 'directory whose profile YAMLs a runtime change of network may name (relative names '
                    'resolve inside it); empty: built-in profile names only'),
    **shared('seed', 'time_scale'),  # release = receive + delay / time_scale
    'queue_capacity': (1000, 'messages in flight per direction; more are tail-dropped (dropped_queue)'),
    'queue_bytes': (DEFAULT_CAPACITY_BYTES, 'bytes in flight per direction; more are tail-dropped (dropped_queue)'),
    'edge_reliability': (STREAM.reliability, 'QoS reliability on edge/*: best_effort or reliable'),
    'edge_durability': (STREAM.durability, 'QoS durability on edge/*: volatile or transient_local'),
    'edge_depth': (STREAM.depth, 'QoS history depth on edge/*'),
    'desktop_reliability': (STREAM.reliability, 'QoS reliability on desktop/*: best_effort or reliable'),
    'desktop_durability': (STREAM.durability, 'QoS durability on desktop/*: volatile or transient_local'),
    'desktop_depth': (STREAM.depth, 'QoS history depth on desktop/*'),
    'edge_stamped': (True, 'the senders on edge/* (the env, beside the shim) stamp their messages on this machine\'s '
                     'steady clock: each delay runs from the message\'s stamp, not from its arrival at the shim'),
    'desktop_stamped': (False, 'the senders on desktop/* (the policy) stamp their messages on this machine\'s '
                        'steady clock: each delay runs from the message\'s stamp, not from its arrival'),
    'stats_period_s': (1.0, 'period of LinkStats on shim/link_stats (seconds)'),
    'realtime_priority': (0, 'if > 0, the release and executor threads run SCHED_FIFO at this priority (Linux, '
                          'needs CAP_SYS_NICE or an rtprio limit); keeps release times accurate on a busy host'),
}


@dataclass(frozen=True)
class ShimConfig:
    """The shim's parameters, read once at start-up."""

    network: str
    profile_dir: str
    seed: int
    time_scale: float
    queue_capacity: int
    queue_bytes: int
    edge_qos: QosConfig
    desktop_qos: QosConfig
    edge_stamped: bool
    desktop_stamped: bool
    stats_period_s: float
    realtime_priority: int

    @classmethod
    def from_node(cls, node: Node) -> ShimConfig:
        """Declare every parameter on `node`, read them once and validate them."""
        p = declare_parameters(node, PARAMETERS, writable=('network',))
        config = cls(p['network'], p['profile_dir'], p['seed'], p['time_scale'], p['queue_capacity'], p['queue_bytes'],
                     QosConfig(p['edge_reliability'], p['edge_durability'], p['edge_depth']),
                     QosConfig(p['desktop_reliability'], p['desktop_durability'], p['desktop_depth']),
                     p['edge_stamped'], p['desktop_stamped'], p['stats_period_s'], p['realtime_priority'])
        if not config.stats_period_s > 0:
            raise ConfigError(f'stats_period_s must be > 0, got {config.stats_period_s}')
        return config


def request_realtime(node: ShimNode, native_id: int, role: str) -> None:
    """Move one thread to SCHED_FIFO at the node's realtime_priority; warn when not permitted."""
    priority = node.config.realtime_priority
    if priority > 0:
        try:
            os.sched_setscheduler(native_id, os.SCHED_FIFO, os.sched_param(priority))
        except OSError as err:
            node.get_logger().warn(f'realtime_priority {priority} not applied to the {role} thread: '
                                   f'{err.strerror}')


class ShimNode(ShimBase):
    """Relays edge/observation -> desktop/observation and desktop/action -> edge/action through a profile."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__('shim', **kwargs)
        self.config = cfg = ShimConfig.from_node(self)
        self._rng = np.random.default_rng(cfg.seed)
        uplink, downlink = resolve_network(cfg.network).make_links(self._rng)
        edge, desktop = cfg.edge_qos.profile(), cfg.desktop_qos.profile()
        self.relay_lanes([
            (Lane(self.get_name(), LinkStats.DIRECTION_UPLINK),
             Relay(uplink, cfg.queue_capacity, cfg.time_scale, capacity_bytes=cfg.queue_bytes),
             self.create_publisher(Observation, 'desktop/observation', desktop).publish),
            (Lane(self.get_name(), LinkStats.DIRECTION_DOWNLINK),
             Relay(downlink, cfg.queue_capacity, cfg.time_scale, capacity_bytes=cfg.queue_bytes),
             self.create_publisher(Action, 'edge/action', edge).publish),
        ])
        self.gaps = GapEstimator()  # uplink observations lost before the shim, from their seq numbers
        self.subscribe_lane(UPLINK, Observation, 'edge/observation', edge, self._observe_ids, cfg.edge_stamped)
        self.subscribe_lane(DOWNLINK, Action, 'desktop/action', desktop, stamped=cfg.desktop_stamped)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.start_relaying(cfg.stats_period_s)
        request_realtime(self, self.releaser.native_id, 'release')
        self.get_logger().info(f'network {cfg.network!r}, time_scale {cfg.time_scale:g}')

    def _observe_ids(self, data: bytes, received_s: float, releases: list[float]) -> None:
        ids = read_observation_ids(data)
        if ids is not None:
            self.gaps.observe(*ids)

    def estimated_losses(self, index: int) -> int:
        return self.gaps.lost if index == UPLINK else 0

    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        """Load a new `network` profile; keep the old links when it is invalid."""
        for param in params:
            if param.name == 'network':
                try:
                    network = check_runtime_network(param.value, self.config.profile_dir)
                    self.releaser.set_links(resolve_network(network).make_links(self._rng))
                except CalfError as err:
                    return SetParametersResult(successful=False, reason=str(err))
                self.get_logger().info(f'network changed to {param.value!r}')
        return SetParametersResult(successful=True)


def main(args: list[str] | None = None) -> int:
    def make() -> ShimNode:
        node = ShimNode()
        request_realtime(node, threading.get_native_id(), 'executor')
        return node

    return run_node('shim_node', make, args, realtime=True)


if __name__ == '__main__':
    sys.exit(main())
