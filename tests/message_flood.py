"""Message flood: as many messages as one publisher can send, for a few seconds, into a live node, then
whether the counters of its LinkStats account for every one (``received + dropped_middleware + rejected``).

The target (``fl`` namespace, one private context) is the shim, flooded with Observations on its
uplink input, or the env node, flooded with Actions. What it never takes is lost before its callback,
in the transport or in its reader's KEEP_LAST history, and counted in ``dropped_middleware`` from the
publisher's DDS sequence numbers (``calf_ros.losses``). A first message is sent alone until the target
has it (losses are counted from the first sample a reader gets); after the flood, once the target has
taken what it holds, one more message alone closes the count (losses at the tail are seen when a
later sample arrives).

    python tests/message_flood.py --seconds 5     # the long mode (bench/bench_fuzz.py flood)
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from message_fuzz import wait_until
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter

from calf_env.env_node import EnvNode
from calf_msgs.msg import Action, LinkStats, Observation
from calf_ros.losses import MiddlewareLosses
from calf_ros.qos import RESULTS, STREAM
from calf_shim.shim_node import UPLINK, ShimNode

NAMESPACE = 'fl'
QUIET_S = 0.3
"""The target has taken everything it holds once its received count stays still this long."""


class Target(NamedTuple):
    """A flooded node: what it reads where, and where it reports on that input."""

    node: Node
    topic: str
    message: Any
    stats_topic: str
    direction: int
    received: Callable[[], int]  # messages its callback took, read in-process
    losses: MiddlewareLosses  # its count of losses on that input


def make_target(name: str, context: Context) -> Target:
    """``shim`` (its uplink) or ``env`` (its actions), reporting every 0.2 s."""
    if name == 'shim':
        shim = ShimNode(namespace=NAMESPACE, context=context, parameter_overrides=[
            Parameter('stats_period_s', value=0.2)])
        return Target(shim, 'edge/observation', Observation(data=[0.0] * 4, shape=[4], run=1), 'shim/link_stats',
                      LinkStats.DIRECTION_UPLINK, lambda: shim.releaser.stats(UPLINK).counters.received,
                      shim.lanes[UPLINK].losses)
    env = EnvNode(namespace=NAMESPACE, context=context, parameter_overrides=[
        Parameter('stats_period_s', value=0.2), Parameter('wait_for_subscriber', value=False)])
    return Target(env, 'action', Action(discrete=0), 'link_stats', LinkStats.DIRECTION_END_TO_END,
                  lambda: env.actions_received, env.losses)


class Flooder(Node):
    """Publishes the target's input messages; keeps the target's LinkStats on that input."""

    def __init__(self, context: Context, target: Target) -> None:
        super().__init__('flooder', namespace=NAMESPACE, context=context)
        self.stats: list[LinkStats] = []
        self.message = target.message
        self.pub = self.create_publisher(type(target.message), target.topic, STREAM.profile())
        self.create_subscription(LinkStats, target.stats_topic,
                                 lambda msg: self.stats.append(msg) if msg.direction == target.direction else None,
                                 RESULTS)
        self.sent = 0

    def send(self) -> None:
        self.pub.publish(self.message)
        self.sent += 1


def run_flood(context: Context, target: str = 'shim', seconds: float = 3.0) -> dict[str, Any]:
    """Flood the ``target`` node (``shim`` or ``env``) for ``seconds``; return the figures."""
    executor = SingleThreadedExecutor(context=context)
    spinner = threading.Thread(target=executor.spin, name='flood-executor', daemon=True)
    nodes: list[Node] = []
    try:
        flooded = make_target(target, context)
        flooder = Flooder(context, flooded)
        nodes = [flooded.node, flooder]
        for node in nodes:
            executor.add_node(node)
        spinner.start()
        received = flooded.received
        while not wait_until(lambda: received() > 0, 1.0):  # the target has heard this publisher
            flooder.send()
        first = flooder.sent - 1  # the first one it got may be any of these: count from the last
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            for _ in range(256):
                flooder.send()
        flood_s = time.monotonic() - start
        settled = _settle(received)
        closed = 0
        while closed < 20:  # one message alone, once the target is idle, reveals the losses at the tail
            before = received()
            flooder.send()
            closed += 1
            if wait_until(lambda before=before: received() > before, 2.0):
                break
        taken = received()  # a report that counts as many was made after the last message was taken
        if not wait_until(lambda: any(s.received >= taken for s in flooder.stats), 10.0):
            raise RuntimeError(f'the {target} published no LinkStats after the flood')
        last = next(s for s in flooder.stats if s.received >= taken)
        sent = flooder.sent - first
        return {
            'target': target, 'seconds': round(flood_s, 2), 'sent': sent, 'rate_per_s': round(sent / flood_s),
            'received': last.received, 'dropped_middleware': last.dropped_middleware,
            'reported_by_middleware': flooded.losses.reported, 'rejected': last.rejected,
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


def main(argv: list[str] | None = None) -> int:
    import rclpy
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--target', choices=('shim', 'env'), default='shim')
    parser.add_argument('--seconds', type=float, default=5.0)
    args = parser.parse_args(argv)
    context = Context()
    rclpy.init(context=context)
    try:
        print(json.dumps(run_flood(context, args.target, args.seconds)))
    finally:
        context.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
