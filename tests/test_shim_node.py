"""ShimNode in-process over DDS: per-direction delays and order, time scale, loss counts, runtime swaps."""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import PrivateNode, spin_until, write_profile

from calf_core.profiles import available_profiles
from calf_msgs.msg import Action, LinkStats, Observation
from calf_ros.conversions import time_msg, time_ns
from calf_ros.qos import RESULTS
from calf_shim.shim_node import ShimNode

pytestmark = pytest.mark.ros

RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
PROBE_EPISODE = 1  # messages sent until the path works; measured messages use episode 0
DISTINCT_MS = 15.0  # the smallest gap between two delays a test tells apart (ms)
DIRECTIONS = {  # name: (message type, topic the client publishes on, topic it receives on)
    'uplink': (Observation, 'edge/observation', 'desktop/observation'),
    'downlink': (Action, 'desktop/action', 'edge/action'),
}


def fixed(ms: float) -> list[dict]:
    return [{'model': 'fixed_delay', 'latency_ms': ms}]


class Client:
    """A plain node on both far sides of the shim: publishes stamped messages, records their delays.

    Messages are stamped with the wall clock, and a delay is the DDS reception time (also wall
    clock) minus the stamp, so that the test's own executor lag is not counted against the shim.
    """

    def __init__(self, node: Node, executor: SingleThreadedExecutor, direction: str) -> None:
        self.node, self.executor = node, executor
        self.msg_type, pub_topic, sub_topic = DIRECTIONS[direction]
        self.pub = node.create_publisher(self.msg_type, pub_topic, RELIABLE)
        node.create_subscription(self.msg_type, sub_topic, self._on_message, RELIABLE)
        self.received: list[tuple[int, float]] = []  # (seq, delay in ms) of measured messages
        self.published = self.arrived = 0  # every message, probes included

    def _on_message(self, msg: Any, info: dict) -> None:
        self.arrived += 1
        if msg.episode != PROBE_EPISODE:
            seq = msg.seq if self.msg_type is Observation else msg.obs_seq
            self.received.append((seq, (info['received_timestamp'] - time_ns(msg.header.stamp)) / 1e6))

    def publish(self, seq: int, episode: int = 0) -> None:
        msg = self.msg_type(episode=episode)
        if self.msg_type is Observation:
            msg.seq = seq
        else:
            msg.obs_seq = seq
        msg.header.stamp = time_msg(time.time_ns())
        self.pub.publish(msg)
        self.published += 1

    def wait_for_path(self, timeout_s: float = 15.0) -> None:
        """Send a probe every 50 ms until one crosses the shim; then wait for the rest of them."""
        timer = self.node.create_timer(0.05, lambda: self.publish(0, PROBE_EPISODE))
        assert spin_until(self.executor, lambda: self.arrived > 0, timeout_s), 'no probe crossed the shim'
        self.node.destroy_timer(timer)
        assert spin_until(self.executor, lambda: self.arrived == self.published, timeout_s)

    def send(self, n: int, period_s: float = 0.005) -> None:
        """Publish n measured messages period_s apart, from a timer; return when the last is out."""
        self.received = []
        seqs = iter(range(n))

        def tick() -> None:
            seq = next(seqs, None)
            if seq is None:
                timer.cancel()
            else:
                self.publish(seq)

        timer = self.node.create_timer(period_s, tick)
        assert spin_until(self.executor, timer.is_canceled, 10.0 + n * period_s)
        self.node.destroy_timer(timer)

    def measure(self, n: int, timeout_s: float = 10.0) -> list[tuple[int, float]]:
        """Send n messages and wait until all of them arrive."""
        self.send(n)
        assert spin_until(self.executor, lambda: len(self.received) >= n, timeout_s), \
            f'{len(self.received)} of {n} messages arrived'
        return self.received


class Graph(PrivateNode):
    """A private context holding one executor, a shim and a client node."""

    def __init__(self) -> None:
        super().__init__('shim_test_client')

    def start_shim(self, **params: Any) -> ShimNode:
        params = {'edge_reliability': 'reliable', 'desktop_reliability': 'reliable', 'stats_period_s': 0.1,
                  **params}
        return self.host(ShimNode, **params)

    def client(self, direction: str) -> Client:
        return Client(self.node, self.executor, direction)


@pytest.fixture
def graph() -> Iterator[Graph]:
    with Graph() as g:
        yield g


def assert_delays(received: list[tuple[int, float]], n: int, delay_ms: float) -> None:
    """All n arrived in order, none before delay_ms, and the median closer to delay_ms than to any other.

    Each test tells its delay from the one it could be confused with (30 vs 15 ms by direction, 15
    vs 60 ms unscaled, 10 vs 30 ms after a swap): at least DISTINCT_MS apart, so a median within
    half of that shows which one was applied. How close releases come to their time (a median error
    of at most 2 ms, the tails) is measured by bench/bench_shim.py: on a loaded two-core host the OS
    can hold a thread back for tens of milliseconds.
    """
    assert [seq for seq, _ in received] == list(range(n))
    errors = np.array([d for _, d in received]) - delay_ms
    assert errors.min() > -0.5, f'released early: {errors.min():.2f} ms'
    assert np.median(errors) < DISTINCT_MS / 2, f'median error {np.median(errors):.2f} ms'


@pytest.mark.parametrize('direction, delay_ms', [('uplink', 30.0), ('downlink', 15.0)])
def test_each_direction_relays_every_message_in_order_after_its_delay(graph: Graph, tmp_path: Path,
                                                                      direction: str, delay_ms: float) -> None:
    graph.start_shim(network=write_profile(tmp_path, 'split', fixed(30.0), fixed(15.0)))
    client = graph.client(direction)
    client.wait_for_path()
    assert_delays(client.measure(40), 40, delay_ms)


def test_time_scale_divides_the_model_delay(graph: Graph, tmp_path: Path) -> None:
    graph.start_shim(network=write_profile(tmp_path, 'slow', fixed(60.0)), time_scale=4.0)
    client = graph.client('uplink')
    client.wait_for_path()
    assert_delays(client.measure(40), 40, 15.0)


@pytest.mark.slow
def test_injected_losses_are_counted_in_link_stats(graph: Graph, tmp_path: Path) -> None:
    graph.start_shim(network=write_profile(tmp_path, 'lossy', [{'model': 'bernoulli_loss', 'p': 0.5}]), seed=3)
    stats: dict[int, LinkStats] = {}
    graph.node.create_subscription(LinkStats, 'shim/link_stats',
                                   lambda msg: stats.__setitem__(msg.direction, msg), RESULTS)
    client = graph.client('uplink')
    client.wait_for_path()
    client.send(100)

    def settled() -> bool:
        up = stats.get(LinkStats.DIRECTION_UPLINK)
        return up is not None and up.received == client.published and up.delivered == client.arrived
    assert spin_until(graph.executor, settled, 10.0)
    up = stats[LinkStats.DIRECTION_UPLINK]
    assert up.reporter == 'shim'
    assert up.received == up.delivered + up.dropped_injected
    assert 25 <= up.dropped_injected <= 75
    assert (up.dropped_queue, up.dropped_middleware, up.rejected) == (0, 0, 0)
    assert 0 < len(client.received) < 100
    assert stats[LinkStats.DIRECTION_DOWNLINK].received == 0


@pytest.mark.slow
def test_bad_runtime_profile_is_rejected_and_the_old_one_kept(graph: Graph, tmp_path: Path) -> None:
    first = write_profile(tmp_path, 'first', fixed(30.0))
    shim = graph.start_shim(network=first, profile_dir=str(tmp_path))
    client = graph.client('uplink')
    client.wait_for_path()
    bad_yaml = write_profile(tmp_path, 'negative', fixed(-5.0))
    for bad, reason in [('no_such_profile', 'unknown network profile'), (bad_yaml, 'latency_ms must be in [0, 60000] ms')]:
        [result] = shim.set_parameters([Parameter('network', value=bad)])
        assert not result.successful and reason in result.reason
    [result] = shim.set_parameters([Parameter('time_scale', value=2.0)])
    assert not result.successful
    assert shim.get_parameter('network').value == first
    assert_delays(client.measure(40), 40, 30.0)
    [result] = shim.set_parameters([Parameter('network', value=write_profile(tmp_path, 'second', fixed(10.0)))])
    assert result.successful
    assert_delays(client.measure(40), 40, 10.0)


@pytest.mark.slow
def test_bad_profile_at_start_up_exits_2_with_one_line() -> None:
    command = [sys.executable, '-m', 'calf_shim.shim_node', '--ros-args', '-p', 'network:=no_such_profile']
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    available = ', '.join(available_profiles())
    assert proc.stderr.strip().splitlines() == [
        f"shim_node: error: unknown network profile 'no_such_profile' (available: {available})"]


def test_the_shim_runs_one_shared_process_for_both_relays(graph: Graph, tmp_path: Path) -> None:
    """A profile's shared stages are one process the shim's two relays meet: messages that reach the shim at
    the same instant each way are held by the same stall and lost in the same Gilbert-Elliott bad spells. Fed
    through the shim's own relays at chosen arrival times, so that no DDS timing enters the comparison."""
    path = tmp_path / 'radio.yaml'
    path.write_text("uplink: []\ndownlink: same\nshared:\n"
                    "  - {model: stall, duration_ms: 100, period_ms: {dist: uniform, low: 300, high: 500}}\n"
                    "  - {model: gilbert_elliott, mean_good_ms: 600, mean_bad_ms: 300, loss_good: 0, loss_bad: 1}\n")
    shim = graph.start_shim(network=str(path), seed=5)
    releaser = shim.releaser
    assert releaser is not None
    start = time.monotonic() + 3600.0  # released long after the test: nothing is published
    up, down = [], []
    for k in range(400):
        received_s = start + 0.01 * k
        up.append([t - received_s for t in releaser.submit(0, Observation(), 64, received_s)])
        down.append([t - received_s for t in releaser.submit(1, Action(), 64, received_s)])
    assert up == down  # one process: the same holds and the same losses each way
    assert 0 < sum(not r for r in up) < 300 and any(r and r[0] > 0.0 for r in up)
