"""The shim node: relays observations (edge -> desktop) and actions (desktop -> edge) through network models.

DDS callbacks only submit the serialized message to a `Relay`; one release thread waits on a
condition until the next release time and publishes the bytes unchanged. The `network`
parameter can be changed at runtime; every other parameter is read-only.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import rclpy
from calf_msgs.msg import Action, LinkStats, Observation
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.event_handler import QoSMessageLostInfo, SubscriptionEventCallbacks, UnsupportedEventTypeError
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher

from calf_shim.conversions import time_msg
from calf_shim.errors import CalfError, ConfigError
from calf_shim.profiles import load_profile
from calf_shim.qos import RESULTS, STREAM, QosConfig
from calf_shim.relay import Relay

PARAMETERS: dict[str, tuple[Any, str]] = {
    'network': ('sim_clean', 'network profile name (calf_bringup/config) or path to a profile YAML; '
                'may be changed at runtime'),
    'seed': (0, 'seed of the network models\' random generator'),
    'time_scale': (1.0, 'divides every model delay: release = receive + delay / time_scale'),
    'queue_capacity': (1000, 'messages in flight per direction; more are tail-dropped (dropped_queue)'),
    'edge_reliability': (STREAM.reliability, 'QoS reliability on edge/*: best_effort or reliable'),
    'edge_durability': (STREAM.durability, 'QoS durability on edge/*: volatile or transient_local'),
    'edge_depth': (STREAM.depth, 'QoS history depth on edge/*'),
    'desktop_reliability': (STREAM.reliability, 'QoS reliability on desktop/*: best_effort or reliable'),
    'desktop_durability': (STREAM.durability, 'QoS durability on desktop/*: volatile or transient_local'),
    'desktop_depth': (STREAM.depth, 'QoS history depth on desktop/*'),
    'stats_period_s': (1.0, 'period of LinkStats on shim/link_stats (seconds)'),
}


@dataclass(frozen=True)
class ShimConfig:
    network: str
    seed: int
    time_scale: float
    queue_capacity: int
    edge_qos: QosConfig
    desktop_qos: QosConfig
    stats_period_s: float

    @classmethod
    def from_node(cls, node: Node) -> ShimConfig:
        """Declare every parameter on `node`, read them once and validate them."""
        try:
            for name, (default, description) in PARAMETERS.items():
                node.declare_parameter(name, default, ParameterDescriptor(
                    description=description, read_only=name != 'network'))
        except ParameterException as err:
            raise ConfigError(' '.join(str(err).split())) from None
        p = {name: node.get_parameter(name).value for name in PARAMETERS}
        config = cls(p['network'], p['seed'], p['time_scale'], p['queue_capacity'],
                     QosConfig(p['edge_reliability'], p['edge_durability'], p['edge_depth']),
                     QosConfig(p['desktop_reliability'], p['desktop_durability'], p['desktop_depth']),
                     p['stats_period_s'])
        if not config.stats_period_s > 0:
            raise ConfigError(f'stats_period_s must be > 0, got {config.stats_period_s}')
        return config


@dataclass
class Route:
    """One direction: its relay, where released messages go, and middleware losses seen."""

    direction: int
    relay: Relay
    publisher: Publisher
    dropped_middleware: int = 0


def _now_s() -> float:
    return time.monotonic_ns() / 1e9


class ShimNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__('shim', **kwargs)
        self.config = cfg = ShimConfig.from_node(self)
        self._rng = np.random.default_rng(cfg.seed)
        uplink, downlink = load_profile(cfg.network).make_links(self._rng)
        edge, desktop = cfg.edge_qos.profile(), cfg.desktop_qos.profile()
        self.routes = (
            Route(LinkStats.DIRECTION_UPLINK, Relay(uplink, cfg.queue_capacity, cfg.time_scale),
                  self.create_publisher(Observation, 'desktop/observation', desktop)),
            Route(LinkStats.DIRECTION_DOWNLINK, Relay(downlink, cfg.queue_capacity, cfg.time_scale),
                  self.create_publisher(Action, 'edge/action', edge)),
        )
        self._subscribe(Observation, 'edge/observation', edge, self.routes[0])
        self._subscribe(Action, 'desktop/action', desktop, self.routes[1])
        self._stats = self.create_publisher(LinkStats, 'shim/link_stats', RESULTS)
        self._stats_seq = 0
        self.create_timer(cfg.stats_period_s, self._publish_stats)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._release_loop, name='shim-release', daemon=True)
        self._thread.start()
        self.get_logger().info(f'network {cfg.network!r}, time_scale {cfg.time_scale:g}')

    def _subscribe(self, msg_type: type, topic: str, qos: Any, route: Route) -> None:
        """Subscribe raw (bytes); count middleware losses where the RMW reports them."""
        def on_lost(info: QoSMessageLostInfo) -> None:
            route.dropped_middleware += info.total_count_change

        def on_message(data: bytes) -> None:
            self._submit(route, data)

        try:
            self.create_subscription(msg_type, topic, on_message, qos, raw=True,
                                     event_callbacks=SubscriptionEventCallbacks(message_lost=on_lost))
        except UnsupportedEventTypeError:
            self.get_logger().warn(f'{topic}: this RMW does not report lost messages')
            self.create_subscription(msg_type, topic, on_message, qos, raw=True)

    def _submit(self, route: Route, data: bytes) -> None:
        with self._cond:
            earliest = self._next_release_s()
            releases = route.relay.submit(_now_s(), data, len(data))
            if releases and (earliest is None or min(releases) < earliest):
                self._cond.notify()

    def _next_release_s(self) -> float | None:
        times = [t for t in (route.relay.next_release_s() for route in self.routes) if t is not None]
        return min(times, default=None)

    def _release_loop(self) -> None:
        """Wait until the next release time, pop what is due, publish it outside the lock."""
        while True:
            with self._cond:
                if self._stopping:
                    return
                now = _now_s()
                batches = [(route.publisher, route.relay.due(now)) for route in self.routes]
                if not any(items for _, items in batches):
                    earliest = self._next_release_s()
                    self._cond.wait(None if earliest is None else earliest - now)
                    continue
            for publisher, items in batches:
                for data in items:
                    publisher.publish(data)

    def _publish_stats(self) -> None:
        stamp = time_msg(self.get_clock().now().nanoseconds)
        for route in self.routes:
            with self._cond:
                counters, relay = route.relay.counters, route.relay
                msg = LinkStats(reporter=self.get_name(), direction=route.direction, received=counters.received,
                                delivered=counters.delivered, dropped_injected=counters.dropped_injected,
                                dropped_queue=counters.dropped_queue,
                                dropped_middleware=route.dropped_middleware)  # rejected: bytes are never parsed
                msg.latency_p50_ms, msg.latency_p95_ms, msg.latency_p99_ms = relay.latency_percentiles_ms()
            msg.header.stamp, msg.seq = stamp, self._stats_seq
            self._stats_seq += 1
            self._stats.publish(msg)

    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        """Load a new `network` profile; keep the old links when it is invalid."""
        for param in params:
            if param.name != 'network':
                continue
            try:
                links = load_profile(param.value).make_links(self._rng)
            except CalfError as err:
                return SetParametersResult(successful=False, reason=str(err))
            with self._cond:
                for route, link in zip(self.routes, links):
                    route.relay.set_link(link)
            self.get_logger().info(f'network changed to {param.value!r}')
        return SetParametersResult(successful=True)

    def destroy_node(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    rclpy.init(args=args)
    node = None
    try:
        node = ShimNode()
        rclpy.spin(node)
    except CalfError as err:
        print(f'shim_node: error: {err}', file=sys.stderr)
        return 2
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
