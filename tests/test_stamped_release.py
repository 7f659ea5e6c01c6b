"""The shim measures a link's delay from the message's stamp when its sender shares the shim's steady clock.

An observation leaves the env at its tick (its ``header.stamp``), as in virtual time; the hop into the shim
(the env's publishing, DDS, the shim's wake-up) is then part of the modelled delay instead of being added to it.
A stamp not on this clock (another machine's, or the wall clock) falls back to the DDS receive time.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from rclpy.serialization import serialize_message
from ros_helpers import spin_until, write_profile
from test_shim_node import RELIABLE, Graph, fixed

from calf_msgs.msg import Action, Observation
from calf_ros.arrival import MAX_AGE_S
from calf_ros.conversions import time_msg
from calf_shim.shim_base import sent_s, stamp_s

EARLY_MS = 20.0  # how long before its publication a message is stamped (an env's tick and step)
DELAY_MS = 30.0


@pytest.mark.parametrize('msg_type', [Observation, Action])
def test_the_stamp_is_read_from_the_serialized_message(msg_type: type) -> None:
    msg = msg_type()
    msg.header.stamp = time_msg(123_456_789_012)
    data = serialize_message(msg)
    assert stamp_s(data) == pytest.approx(123.456789012, abs=1e-9)
    assert stamp_s(data[:8]) is None


def test_a_stamp_counts_only_when_it_can_be_this_clocks() -> None:
    msg = Observation()
    msg.header.stamp = time_msg(100_000_000_000)  # 100 s
    data = serialize_message(msg)
    assert sent_s(data, 100.004) == pytest.approx(100.0)  # sent 4 ms before it arrived
    assert sent_s(data, 99.0) == 99.0  # from the future: not this clock
    assert sent_s(data, 100.0 + MAX_AGE_S + 0.1) == pytest.approx(100.0 + MAX_AGE_S + 0.1)  # too old: not this clock


class SteadyClient:
    """Publishes Observations stamped ``EARLY_MS`` before their publication on the steady clock, as the env
    stamps its ticks; records each one's time from publication to DDS reception beyond the shim (wall clock)."""

    def __init__(self, graph: Graph) -> None:
        self.node, self.executor = graph.node, graph.executor
        self.pub = self.node.create_publisher(Observation, 'edge/observation', RELIABLE)
        self.node.create_subscription(Observation, 'desktop/observation', self._on_message, RELIABLE)
        self.published: dict[int, int] = {}  # seq: wall ns at publication
        self.delays_ms: dict[int, float] = {}

    def _on_message(self, msg: Observation, info: dict[str, Any]) -> None:
        if msg.seq in self.published:
            self.delays_ms[msg.seq] = (info['received_timestamp'] - self.published[msg.seq]) / 1e6

    def publish(self, seq: int) -> None:
        msg = Observation(seq=seq)
        msg.header.stamp = time_msg(time.monotonic_ns() - int(EARLY_MS * 1e6))
        self.published[seq] = time.time_ns()
        self.pub.publish(msg)

    def median_delay_ms(self, n: int) -> float:
        """Publish until one crosses the shim (discovery), then ``n`` more 10 ms apart; their median delay."""
        probes = iter(range(10**6, 10**6 + 1000))
        timer = self.node.create_timer(0.05, lambda: self.publish(next(probes)))
        assert spin_until(self.executor, lambda: bool(self.delays_ms), 15.0), 'no message crossed the shim'
        self.node.destroy_timer(timer)
        seqs = iter(range(n))
        timer = self.node.create_timer(0.01, lambda: (seq := next(seqs, None)) is not None and self.publish(seq))
        assert spin_until(self.executor, lambda: all(seq in self.delays_ms for seq in range(n)), 20.0), \
            f'{sum(seq in self.delays_ms for seq in range(n))} of {n} arrived'
        self.node.destroy_timer(timer)
        return statistics.median(self.delays_ms[seq] for seq in range(n))


@pytest.mark.ros
@pytest.mark.slow
@pytest.mark.parametrize('stamped, expected_ms', [(True, DELAY_MS - EARLY_MS), (False, DELAY_MS)])
def test_the_delay_runs_from_the_senders_stamp(tmp_path: Path, stamped: bool, expected_ms: float) -> None:
    """Stamped 20 ms before publication, a message crosses a 30 ms link 10 ms after it (30 ms unstamped)."""
    with Graph() as graph:
        graph.start_shim(network=write_profile(tmp_path, 'fixed', fixed(DELAY_MS)), edge_stamped=stamped)
        median = SteadyClient(graph).median_delay_ms(30)
    assert expected_ms - 0.5 < median < expected_ms + EARLY_MS / 2, f'median {median:.1f} ms'
