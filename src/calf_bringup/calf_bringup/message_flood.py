"""Message flood: as many Observations as one publisher can send, for a few seconds, into a live shim,
then whether its counters account for every one (``received + dropped_middleware + rejected``).

The shim (``fl`` namespace, one private context) relays what it takes; what it never takes is lost
before its callback, in the transport or in its reader's KEEP_LAST history, and counted in
``dropped_middleware`` from the publisher's DDS sequence numbers (``calf_ros.losses``). A first
message is sent alone until the shim has it (losses are counted from the first sample a reader
gets); after the flood, once the shim has taken what it holds, one more message alone closes the
count (losses at the tail are seen when a later sample arrives).

    python -m calf_bringup.message_flood --seconds 5     # the long mode (bench/bench_fuzz.py flood)
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter

from calf_msgs.msg import LinkStats, Observation
from calf_ros.qos import RESULTS, STREAM
from calf_shim.shim_node import UPLINK, ShimNode

NAMESPACE = 'fl'
QUIET_S = 0.3
"""The shim has taken everything it holds once its received count stays still this long."""


class Flooder(Node):
    """Publishes Observations on the shim's input; keeps the shim's uplink LinkStats."""

    def __init__(self, context: Context) -> None:
        super().__init__('flooder', namespace=NAMESPACE, context=context)
        self.stats: list[LinkStats] = []
        self.pub = self.create_publisher(Observation, 'edge/observation', STREAM.profile())
        self.create_subscription(LinkStats, 'shim/link_stats', self._on_stats, RESULTS)
        self.sent = 0

    def _on_stats(self, msg: LinkStats) -> None:
        if msg.direction == LinkStats.DIRECTION_UPLINK:
            self.stats.append(msg)

    def send(self, msg: Observation) -> None:
        msg.seq = self.sent
        self.pub.publish(msg)
        self.sent += 1


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``condition`` while the executor thread spins the nodes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not condition():
        time.sleep(0.01)
    return condition()


def run_flood(context: Context, seconds: float = 3.0, depth: int = 10) -> dict[str, Any]:
    """Flood a shim whose input keeps ``depth`` messages, for ``seconds``; return the figures."""
    executor = SingleThreadedExecutor(context=context)
    spinner = threading.Thread(target=executor.spin, name='flood-executor', daemon=True)
    nodes: list[Node] = []
    try:
        shim = ShimNode(namespace=NAMESPACE, context=context, parameter_overrides=[
            Parameter('stats_period_s', value=0.2), Parameter('edge_depth', value=depth)])
        flooder = Flooder(context)
        nodes = [shim, flooder]
        for node in nodes:
            executor.add_node(node)
        spinner.start()
        msg = Observation(data=[0.0] * 4, shape=[4], run=1)

        def received() -> int:
            return shim.releaser.stats(UPLINK).counters.received

        while not wait_until(lambda: received() > 0, 1.0):  # the shim has heard this publisher
            flooder.send(msg)
        first = flooder.sent - 1  # the first one it got may be any of these: count from the last
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            for _ in range(256):
                flooder.send(msg)
        flood_s = time.monotonic() - start
        settled = _settle(received)
        closed = 0
        while closed < 20:  # one message alone, once the shim is idle, reveals the losses at the tail
            before = received()
            flooder.send(msg)
            closed += 1
            if wait_until(lambda before=before: received() > before, 2.0):
                break
        stamp = shim.get_clock().now().nanoseconds
        if not wait_until(lambda: any(_stamp_ns(s) > stamp for s in flooder.stats), 10.0):
            raise RuntimeError('the shim published no LinkStats after the flood')
        last = next(s for s in flooder.stats if _stamp_ns(s) > stamp)
        sent = flooder.sent - first
        return {
            'seconds': round(flood_s, 2), 'sent': sent, 'rate_per_s': round(sent / flood_s),
            'received': last.received, 'dropped_middleware': last.dropped_middleware,
            'reported_by_fast_dds': shim.lanes[UPLINK].losses.reported, 'rejected': last.rejected,
            'dropped_queue': last.dropped_queue, 'delivered': last.delivered,
            'accounted': last.received + last.dropped_middleware + last.rejected,
            'settled': settled, 'closing_messages': closed,
        }
    finally:
        executor.shutdown()
        if spinner.is_alive():
            spinner.join(timeout=10.0)
        for node in reversed(nodes):
            node.destroy_node()


def _settle(count: Callable[[], int], timeout_s: float = 30.0) -> bool:
    """Wait until ``count()`` has not changed for ``QUIET_S``; False if it still moves after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = count()
        time.sleep(QUIET_S)
        if count() == before:
            return True
    return False


def _stamp_ns(msg: LinkStats) -> int:
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


def main(argv: list[str] | None = None) -> int:
    import rclpy
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=5.0)
    parser.add_argument('--depth', type=int, default=10, help="the shim's input history depth (edge_depth)")
    args = parser.parse_args(argv)
    context = Context()
    rclpy.init(context=context)
    try:
        print(json.dumps(run_flood(context, args.seconds, args.depth)))
    finally:
        context.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
