"""What every shim node shares, as topic_tools' ``ToolBaseNode`` does for its tools.

A shim relays serialized messages, never parsed, through one ``Relay`` per lane (a direction of
the calf_msgs shim, an entry of the generic shim). ``ShimBase`` holds the lanes' ``ReleaseThread``
on the monotonic clock, subscribes raw to each lane's input, backdating each message to when DDS
received it so that executor lag does not add to the modelled delay, and publishes one
``LinkStats`` per lane on ``shim/link_stats``. ``subscribe_raw`` is also the trace recorder's.

A lane whose senders stamp their messages on this machine's steady clock (``stamped``: the env's
Observations, a policy's Actions on the same host) goes further back, to the message's ``header.stamp``:
the link's delay then runs from when the message was sent, as in virtual time (an observation leaves at
its tick), and the hop into the shim (the env's publishing, DDS, the shim's wake-up: about 1 ms of a
live round trip's p50 at delay_only) is part of the modelled delay instead of being added to it. A stamp
in the future or older than ``MAX_AGE_S`` (another machine's clock) falls back to the DDS receive time.
"""
from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rclpy.event_handler import (
    QoSMessageLostInfo,
    SubscriptionEventCallbacks,
    UnsupportedEventTypeError,
)
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.subscription import Subscription

from calf_msgs.msg import LinkStats
from calf_ros.arrival import MAX_AGE_S, age_s
from calf_ros.conversions import link_stats_msg
from calf_ros.losses import MiddlewareLosses
from calf_ros.qos import RESULTS
from calf_shim.relay import Relay, ReleaseThread


def monotonic_s() -> float:
    """The shims' clock: monotonic seconds."""
    return time.monotonic_ns() / 1e9


def received_s(info: dict) -> float:
    """When DDS received the message, on the monotonic clock (``calf_ros.arrival``)."""
    return monotonic_s() - age_s(info)


def stamp_s(data: bytes) -> float | None:
    """``header.stamp`` in seconds of a serialized message that starts with a std_msgs/Header (Observation,
    Action), or None if the bytes are too short. CDR: a 4-byte encapsulation header, then stamp (int32, uint32)."""
    if len(data) < 12:
        return None
    sec, nanosec = struct.unpack_from('<iI' if data[1] & 1 else '>iI', data, 4)
    return sec + nanosec / 1e9


def sent_s(data: bytes, received: float) -> float:
    """When a message stamped on this machine's steady clock was sent: its stamp, unless that is in the future
    or more than ``MAX_AGE_S`` before ``received`` (not this clock), then ``received``."""
    stamp = stamp_s(data)
    return stamp if stamp is not None and 0.0 <= received - stamp <= MAX_AGE_S else received


def subscribe_raw(node: Node, msg_type: type, topic: str, callback: Callable[..., None], qos: QoSProfile,
                  on_lost: Callable[[QoSMessageLostInfo], None]) -> Subscription:
    """A raw subscription (serialized bytes) that reports middleware losses where the RMW can."""
    try:
        return node.create_subscription(msg_type, topic, callback, qos, raw=True,
                                        event_callbacks=SubscriptionEventCallbacks(message_lost=on_lost))
    except UnsupportedEventTypeError:
        node.get_logger().warn(f'{topic}: this RMW does not report lost messages')
        return node.create_subscription(msg_type, topic, callback, qos, raw=True)


@dataclass
class Lane:
    """One relayed stream as LinkStats reports it."""

    reporter: str  # LinkStats.reporter
    direction: int  # LinkStats.direction
    losses: MiddlewareLosses = field(default_factory=MiddlewareLosses)  # lost before the lane's input callback


class ShimBase(Node):
    """A node relaying lanes of serialized messages through network models, with LinkStats per lane.

    A subclass calls ``relay_lanes`` once with each lane's Relay and send function, then
    ``subscribe_lane`` for each input, then ``start_relaying``.
    """

    def __init__(self, node_name: str, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.lanes: list[Lane] = []
        self.releaser: ReleaseThread | None = None
        self._stats_seq = 0

    def relay_lanes(self, lanes: Sequence[tuple[Lane, Relay, Callable[[Any], None]]]) -> None:
        """Lane i is relayed by its Relay and released through its send function."""
        self.lanes = [lane for lane, _, _ in lanes]
        self.releaser = ReleaseThread([(relay, send) for _, relay, send in lanes], clock=monotonic_s)

    def subscribe_lane(self, index: int, msg_type: type, topic: str, qos: QoSProfile,
                       on_relayed: Callable[[bytes, float, list[float]], None] | None = None,
                       stamped: bool = False) -> Subscription:
        """Relay what arrives on ``topic`` through lane ``index``; then ``on_relayed(data, received_s, releases)``.
        ``stamped``: its senders stamp ``header.stamp`` on this machine's steady clock (``sent_s``)."""
        lane = self.lanes[index]

        def on_lost(info: QoSMessageLostInfo) -> None:
            lane.losses.on_reported(info.total_count_change)

        def on_message(data: bytes, info: dict) -> None:
            when = sent_s(data, received_s(info)) if stamped else received_s(info)
            lane.losses.on_message(info)
            releases = self.releaser.submit(index, data, len(data), when)
            if on_relayed is not None:
                on_relayed(data, when, releases)

        return subscribe_raw(self, msg_type, topic, on_message, qos, on_lost)

    def start_relaying(self, stats_period_s: float) -> None:
        """Publish LinkStats every ``stats_period_s`` and start releasing."""
        self._stats = self.create_publisher(LinkStats, 'shim/link_stats', RESULTS)
        self.create_timer(stats_period_s, self._publish_stats)
        self.releaser.start()

    def _publish_stats(self) -> None:
        """One LinkStats per lane; ``rejected`` stays 0, since a shim never parses what it relays."""
        stamp_ns = self.get_clock().now().nanoseconds
        for index, lane in enumerate(self.lanes):
            c, latency_ms = self.releaser.stats(index)
            self._stats.publish(link_stats_msg(
                self._stats_seq, lane.reporter, lane.direction, stamp_ns, latency_ms, received=c.received,
                delivered=c.delivered, dropped_injected=c.dropped_injected, dropped_queue=c.dropped_queue,
                dropped_middleware=lane.losses.count,
                dropped_middleware_estimated=self.estimated_losses(index)))
            self._stats_seq += 1

    def estimated_losses(self, index: int) -> int:
        """Messages of lane ``index`` estimated lost before the shim (LinkStats.dropped_middleware_estimated)."""
        return 0

    def destroy_node(self) -> None:
        if self.releaser is not None:
            self.releaser.stop()
        super().destroy_node()
