"""The generic shim node: impairs topics of any message type, as listed in a relay config YAML.

Per entry of the config (`calf_shim.topic_relay_config`) it holds one raw subscription on
`in_topic`, one publisher on `out_topic` and one `Relay` with the entry's profile direction; a
single `ReleaseThread` publishes the serialized bytes, never deserialized, at their release times.
Without a `qos` in the config, an entry opens once a publisher on its `in_topic` is discovered,
with that publisher's QoS. Every `discovery_period_s` the graph is checked: an endpoint whose type
differs from the configured one stops the node with a one-line error (exit code 2). LinkStats per
entry go to `shim/link_stats`, with `reporter` = the entry's resolved in_topic.

With `trace_bag`, every relayed message becomes one `calf_msgs/TraceSample` row in a new rosbag2
bag (MCAP or sqlite3), on `/calf/trace/<in_topic>` per entry, with the entry's direction. The shim
needs no pairing (unlike `calf_shim.trace_recorder_node`, which matches calf_msgs keys that opaque
bytes do not have): the relay decides each message's fate when it arrives, so the row is written
then. sent = when DDS received the message, received = the release of its first copy; a message
the model or the full queue drops is lost. Times are model time (the shim's steady clock times
`time_scale`), so the delays are the profile's at any time scale. The bag is flushed every
`trace_flush_period_s` and closed when the node stops (SIGINT, SIGTERM, or a fatal type mismatch);
after a SIGKILL `calf trace recover` keeps every flushed row. A message still in flight when the
node stops is recorded as delivered although it is never published.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy
from rclpy.topic_endpoint_info import TopicEndpointInfo

from calf_core.bags import TRACE_TOPIC, TraceBagWriter
from calf_core.errors import ConfigError
from calf_core.traces import message_sample
from calf_ros.message_types import resolve_type
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters
from calf_ros.qos import QosConfig, mirror_qos
from calf_ros.run_params import shared
from calf_shim.relay import DEFAULT_CAPACITY_BYTES, Relay
from calf_shim.shim_base import Lane, ShimBase
from calf_shim.topic_relay_config import Endpoint, RelayEntry, check_types, load_relay_config

PARAMETERS: dict[str, tuple[Any, str]] = {
    'config': ('', 'relay config YAML: a list of {in_topic, out_topic, type, direction, profile, qos}'),
    **shared('seed', 'time_scale'),  # one child generator per entry; release = receive + delay / time_scale
    'queue_capacity': (1000, 'messages in flight per entry; more are tail-dropped (dropped_queue)'),
    'queue_bytes': (DEFAULT_CAPACITY_BYTES, 'bytes in flight per entry; more are tail-dropped (dropped_queue)'),
    'stats_period_s': (1.0, 'period of LinkStats on shim/link_stats (seconds)'),
    'discovery_period_s': (0.5, 'period of the graph checks: QoS mirroring and type mismatches (seconds)'),
    'trace_bag': ('', 'bag to create (must not exist) with one TraceSample per relayed message; empty: no trace'),
    'trace_storage': ('mcap', 'storage of trace_bag: mcap or sqlite3'),
    'trace_flush_period_s': (1.0, 'period of trace_bag flushes: what a SIGKILL can lose (seconds)'),
}
UNKNOWN_NODE = '_NODE_NAME_UNKNOWN_'  # rmw's node name of an endpoint whose participant is not yet discovered


@dataclass(frozen=True)
class GenericShimConfig:
    """The generic shim's parameters and relay entries, read once at start-up."""

    entries: tuple[RelayEntry, ...]
    seed: int
    time_scale: float
    queue_capacity: int
    queue_bytes: int
    stats_period_s: float
    discovery_period_s: float
    trace_bag: str
    trace_storage: str
    trace_flush_period_s: float

    @classmethod
    def from_node(cls, node: Node) -> GenericShimConfig:
        """Declare every parameter on `node`, read them once, load and validate the relay config."""
        p = declare_parameters(node, PARAMETERS)
        if not p['config']:
            raise ConfigError('no relay config given: pass --ros-args -p config:=FILE.yaml')
        periods = {name: p[name] for name in ('stats_period_s', 'discovery_period_s', 'trace_flush_period_s')}
        if not all(value > 0 for value in periods.values()):
            raise ConfigError(f'{", ".join(periods)} must be > 0, got {", ".join(map(str, periods.values()))}')
        return cls(tuple(load_relay_config(p.pop('config'))), **p)


class _Route:
    """One entry at run time: resolved topic names, message class, publisher once opened."""

    def __init__(self, node: Node, index: int, entry: RelayEntry) -> None:
        self.index, self.entry, self.msg_type = index, entry, resolve_type(entry.type_name)
        self.in_name, self.out_name = node.resolve_topic_name(entry.in_topic), node.resolve_topic_name(entry.out_topic)
        self.publisher: Publisher | None = None
        self.trace_topic, self.traced = TRACE_TOPIC + self.in_name, 0  # trace rows written so far
        self.waiting_logged = False

    def send(self, data: bytes) -> None:
        self.publisher.publish(data)


class GenericShimNode(ShimBase):
    """Relays each configured topic through its profile, as serialized bytes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__('generic_shim', **kwargs)
        self.config = cfg = GenericShimConfig.from_node(self)
        rngs = np.random.default_rng(cfg.seed).spawn(len(cfg.entries))
        self.routes = [_Route(self, i, entry) for i, entry in enumerate(cfg.entries)]
        self.relay_lanes([
            (Lane(route.in_name, int(entry.direction)),
             Relay(entry.profile.make_links(rng)[entry.direction], cfg.queue_capacity, cfg.time_scale,
                   capacity_bytes=cfg.queue_bytes), route.send)
            for entry, rng, route in zip(cfg.entries, rngs, self.routes)])
        self._trace: TraceBagWriter | None = None
        self._check_graph()
        if cfg.trace_bag:  # last, so that no earlier error leaves an unclosed bag
            self._trace = self._open_trace()
        self.create_timer(cfg.discovery_period_s, self._check_graph)
        self.start_relaying(cfg.stats_period_s)
        self.get_logger().info(', '.join(f'{r.in_name} -> {r.out_name} ({r.entry.type_name}, '
                                         f'{r.entry.profile.name} {r.entry.direction.name.lower()})'
                                         for r in self.routes) + f', time_scale {cfg.time_scale:g}')

    def _open_trace(self) -> TraceBagWriter:
        writer = TraceBagWriter(self.config.trace_bag, self.config.trace_storage, [r.trace_topic for r in self.routes])
        self.create_timer(self.config.trace_flush_period_s, writer.flush)
        self.get_logger().info(f'tracing every relayed message into {self.config.trace_storage} bag '
                               f'{self.config.trace_bag!r}')
        return writer

    def _check_graph(self) -> None:
        """Fail on a type mismatch; open each entry whose QoS is now known."""
        for route in self.routes:
            check_types(route.entry.type_name, self._endpoints(route.in_name) + self._endpoints(route.out_name))
            if route.publisher is None:
                qos = route.entry.qos or self._mirrored_qos(route)
                if qos is not None:
                    self._open(route, qos)

    def _endpoints(self, topic: str) -> list[Endpoint]:
        found = [('publisher', info) for info in self.get_publishers_info_by_topic(topic)]
        found += [('subscription', info) for info in self.get_subscriptions_info_by_topic(topic)]
        return [Endpoint(topic, _node_name(info), kind, info.topic_type) for kind, info in found]

    def _mirrored_qos(self, route: _Route) -> QosConfig | None:
        """The QoS of the publishers on in_topic, or None (logged once) while there are none."""
        offered = [('reliable' if info.qos_profile.reliability == ReliabilityPolicy.RELIABLE else 'best_effort',
                    'transient_local' if info.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
                    else 'volatile') for info in self.get_publishers_info_by_topic(route.in_name)]
        if offered:
            return mirror_qos(offered)
        if not route.waiting_logged:
            self.get_logger().info(f'{route.in_name}: waiting for a publisher to mirror its QoS')
            route.waiting_logged = True
        return None

    def _open(self, route: _Route, qos: QosConfig) -> None:
        """Create the publisher, then the raw subscription of the entry's lane."""
        profile = qos.profile()
        route.publisher = self.create_publisher(route.msg_type, route.out_name, profile)

        def on_relayed(data: bytes, received_s: float, releases: list[float]) -> None:
            if self._trace is not None:
                self._write_row(route, received_s, releases, len(data))

        self.subscribe_lane(route.index, route.msg_type, route.in_name, profile, on_relayed)
        self.get_logger().info(f'{route.in_name} -> {route.out_name}: {qos.reliability}, {qos.durability}, '
                               f'depth {qos.depth}')

    def _write_row(self, route: _Route, received_s: float, releases: list[float], size_bytes: int) -> None:
        """The message's TraceSample, in model time: the shim's clock times time_scale."""
        scale = self.config.time_scale
        sample = message_sample(route.entry.direction, route.traced, received_s * scale,
                                [t * scale for t in releases], size_bytes)
        route.traced += 1
        self._trace.write_sample(sample, self.get_clock().now().nanoseconds, route.trace_topic)

    def destroy_node(self) -> None:
        self.releaser.stop()
        if self._trace is not None:
            self._trace.close()
            self.get_logger().info(f'closed trace bag {self.config.trace_bag!r}: {self._trace.samples} samples')
        super().destroy_node()


def _node_name(info: TopicEndpointInfo) -> str:
    """The endpoint's node, fully qualified; '' while discovery has not named it."""
    if info.node_name == UNKNOWN_NODE:
        return ''
    return f'{info.node_namespace.rstrip("/")}/{info.node_name}'


def main(args: list[str] | None = None) -> int:
    return run_node('generic_shim_node', GenericShimNode, args)


if __name__ == '__main__':
    sys.exit(main())
