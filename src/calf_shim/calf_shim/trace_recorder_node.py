"""The trace recorder node: the fate of every observation and action crossing the link, into a bag.

It subscribes to both sides of each direction (``edge/observation`` -> ``desktop/observation``,
``desktop/action`` -> ``edge/action``, relative to its namespace, ``/calf`` in the CALF graph),
pairs the two copies of each message (``calf_core.traces.TraceMatcher``, on this node's steady
clock) and writes one ``calf_msgs/TraceSample`` per message into an MCAP (default) or sqlite3 bag;
with ``raw``, also the raw Observation and Action messages. Each sample is republished on
``trace`` for live monitoring. Bag log times are system time, as in ``ros2 bag record``.
A direction is traced from the first message after its far-side subscription matched a publisher:
before that, a message missing on the far side would be a discovery artefact, not a loss.

Robustness: SIGINT and SIGTERM stop the node (``calf_ros.node_main``) and ``destroy_node``
closes the bag cleanly; messages still waiting for their far side then are not recorded. The bag
is flushed every ``flush_period_s`` (the MCAP chunk is closed and fsynced; sqlite3 commits). After
a SIGKILL, ``calf trace recover`` keeps every flushed chunk: at most the samples of the last
``flush_period_s`` are lost, plus the messages waiting for their far side (``loss_timeout_s``).
Run the graph at time_scale 1 when recording: the trace holds wall-clock delays.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from rclpy.clock import Clock, ClockType
from rclpy.event_handler import QoSMessageLostInfo
from rclpy.node import Node
from rclpy.serialization import deserialize_message
from rclpy.subscription import Subscription
from std_msgs.msg import Header

from calf_core.bags import ACTION_TYPE, OBSERVATION_TYPE, TraceBagWriter
from calf_core.errors import ConfigError
from calf_core.traces import Direction, Sample, TraceMatcher
from calf_msgs.msg import Action, Observation, TraceSample
from calf_ros.conversions import time_msg
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters
from calf_ros.qos import RESULTS, QosConfig
from calf_shim.shim_base import subscribe_raw

PARAMETERS: dict[str, tuple[Any, str]] = {
    'out': ('', 'bag directory to create (required; must not exist)'),
    'storage': ('mcap', 'bag storage: mcap or sqlite3'),
    'raw': (False, 'also record the raw Observation and Action messages of both sides'),
    'duration_s': (0.0, 'stop after this many seconds; 0 records until SIGINT or SIGTERM'),
    'loss_timeout_s': (2.0, 'a message not seen on the far side this long after the near side is lost'),
    'flush_period_s': (1.0, 'period of bag flushes: what a SIGKILL can lose (seconds)'),
    'max_pending': (10_000, 'messages waiting for their far side; beyond it the oldest is dropped'),
    'depth': (100, 'history depth of the best-effort subscriptions'),
}
ROUTES = (  # direction, near (sender's) topic, far (receiver's) topic, type, bag type, key field
    (Direction.UPLINK, 'edge/observation', 'desktop/observation', Observation, OBSERVATION_TYPE, 'seq'),
    (Direction.DOWNLINK, 'desktop/action', 'edge/action', Action, ACTION_TYPE, 'obs_seq'),
)
EXPIRE_S = 0.1  # period of the loss expiry


@dataclass(frozen=True)
class RecorderConfig:
    out: str
    storage: str
    raw: bool
    duration_s: float
    loss_timeout_s: float
    flush_period_s: float
    max_pending: int
    depth: int

    @classmethod
    def from_node(cls, node: Node) -> RecorderConfig:
        """Declare every parameter on ``node``, read them once and validate them."""
        config = cls(**declare_parameters(node, PARAMETERS))
        if not config.out:
            raise ConfigError('parameter out (the bag to create) is required')
        if config.duration_s < 0 or not (config.loss_timeout_s > 0 and config.flush_period_s > 0):
            raise ConfigError(f'duration_s must be >= 0, loss_timeout_s and flush_period_s > 0, got '
                              f'{config.duration_s}, {config.loss_timeout_s}, {config.flush_period_s}')
        return config


class TraceRecorderNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__('trace_recorder', **kwargs)
        self.config = cfg = RecorderConfig.from_node(self)
        self.matcher = TraceMatcher(int(cfg.loss_timeout_s * 1e9), cfg.max_pending)
        self.writer = TraceBagWriter(cfg.out, cfg.storage)
        self.finished = False  # duration_s reached
        self.missed = 0  # messages the middleware reported lost on these subscriptions
        self._far: dict[Direction, Subscription] = {}
        self._armed: set[Direction] = set()  # directions whose far side has matched a publisher
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._samples = self.create_publisher(TraceSample, 'trace', RESULTS)
        qos = QosConfig(depth=cfg.depth).profile()
        for direction, near, far, msg_type, bag_type, field in ROUTES:
            for topic, is_far in ((near, False), (far, True)):
                callback = partial(self._on_message, direction, is_far, msg_type, field)
                sub = self._subscribe(msg_type, topic, qos, callback)
                if is_far:
                    self._far[direction] = sub
                if cfg.raw:
                    self.writer.add_topic(sub.topic_name, bag_type)
        self.create_timer(EXPIRE_S, self._expire)
        self.create_timer(cfg.flush_period_s, self.writer.flush)
        if cfg.duration_s > 0:
            self.create_timer(cfg.duration_s, self._finish)
        self.get_logger().info(f'recording {cfg.storage} bag {cfg.out!r}')

    def _subscribe(self, msg_type: type, topic: str, qos: Any, callback: Any) -> Subscription:
        """A raw subscription; counts middleware losses where the RMW reports them."""
        def on_lost(info: QoSMessageLostInfo) -> None:
            self.missed += info.total_count_change

        name = self.resolve_topic_name(topic)
        return subscribe_raw(self, msg_type, name, partial(callback, name), qos, on_lost)

    def _on_message(self, direction: Direction, is_far: bool, msg_type: type, field: str, topic: str,
                    data: bytes) -> None:
        now = self._steady.now().nanoseconds
        if self._is_armed(direction):
            msg = deserialize_message(data, msg_type)
            seen = self.matcher.far if is_far else self.matcher.near
            self._record([seen(direction, (msg.episode, getattr(msg, field)), len(data), now)])
        if self.config.raw:
            self.writer.write_raw(topic, data, self.get_clock().now().nanoseconds)

    def _is_armed(self, direction: Direction) -> bool:
        if direction not in self._armed and self._far[direction].get_publisher_count() > 0:
            self._armed.add(direction)
            self.get_logger().info(f'{direction.name.lower()}: far side matched, tracing')
        return direction in self._armed

    def _record(self, samples: Sequence[Sample | None]) -> None:
        log_ns = self.get_clock().now().nanoseconds
        for s in samples:
            if s is None:
                continue
            self.writer.write_sample(s, log_ns)
            self._samples.publish(_sample_msg(s, log_ns))

    def _expire(self) -> None:
        self._record(self.matcher.expire(self._steady.now().nanoseconds))

    def _finish(self) -> None:
        self.finished = True

    def destroy_node(self) -> None:
        """Close the bag, report what was recorded, then destroy the node."""
        self.writer.close()
        m = self.matcher
        self.get_logger().info(
            f'closed {self.config.out!r}: {self.writer.samples} samples; {m.pending} in flight not recorded, '
            f'{m.late} late copies, {m.unmatched} unmatched, {m.overflow} dropped (full), '
            f'{self.missed} missed by the middleware')
        super().destroy_node()


def _sample_msg(s: Sample, stamp_ns: int) -> TraceSample:
    return TraceSample(header=Header(stamp=time_msg(stamp_ns)), seq=s.seq, direction=s.direction, sent_ns=s.sent_ns,
                       received_ns=s.received_ns, size_bytes=s.size_bytes, lost=s.lost)


def main(args: list[str] | None = None) -> int:
    """Record until SIGINT, SIGTERM or duration_s; the bag is closed in every case but SIGKILL."""
    return run_node('trace_recorder', TraceRecorderNode, args, finished=lambda node: node.finished)


if __name__ == '__main__':
    sys.exit(main())
