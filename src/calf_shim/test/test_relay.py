"""Relay: exact release sequences, drop accounting, bounded queue, runtime link swaps and time scaling."""
from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from calf_core.errors import ConfigError
from calf_core.link import Link
from calf_core.models import Bandwidth, BernoulliLoss, Duplicate, FixedDelay, GaussianDelay, TraceReplay
from calf_shim.relay import Relay, ReleaseThread, percentiles_ms


def link(*stages, reorder: bool = True) -> Link:
    return Link(list(stages), np.random.default_rng(0), reorder=reorder)


def trace(delays_ms: list[float], lost: list[bool] | None = None) -> Link:
    return link(TraceReplay(delays_ms, lost))


def test_fixed_delay_releases_each_message_after_the_delay() -> None:
    relay = Relay(link(FixedDelay(10.0)), capacity=10)
    for now_s, item in [(0.0, 'a'), (0.001, 'b'), (0.002, 'c')]:
        assert relay.submit(now_s, item, 64) == [pytest.approx(now_s + 0.010)]
    assert relay.next_release_s() == pytest.approx(0.010)
    assert relay.due(0.0099) == []
    assert relay.due(0.0105) == ['a']
    assert relay.due(0.0125) == ['b', 'c']
    assert relay.next_release_s() is None
    assert relay.counters.received == 3 and relay.counters.delivered == 3


def test_due_pops_in_release_order_and_ties_in_submit_order() -> None:
    relay = Relay(trace([30.0, 10.0, 10.0]), capacity=10)
    for i, item in enumerate('abc'):
        relay.submit(i * 0.001, item, 64)
    assert relay.due(1.0) == ['b', 'c', 'a']
    ideal = Relay(link(), capacity=10)
    for item in 'xyz':
        assert ideal.submit(5.0, item, 64) == [5.0]
    assert ideal.due(5.0) == ['x', 'y', 'z']


def test_injected_losses_are_counted_and_never_released() -> None:
    relay = Relay(trace([5.0] * 4, lost=[False, True, False, True]), capacity=10)
    returned = [relay.submit(i * 0.01, i, 64) for i in range(7)]  # the trace wraps after 4 records
    assert [len(r) for r in returned] == [1, 0, 1, 0, 1, 0, 1]
    assert relay.due(1.0) == [0, 2, 4, 6]
    c = relay.counters
    assert (c.received, c.delivered, c.dropped_injected, c.dropped_queue) == (7, 4, 3, 0)


def test_bandwidth_queue_drops_of_the_model_count_as_injected() -> None:
    relay = Relay(link(Bandwidth(rate_kbps=8.0, queue_packets=0)), capacity=10)
    assert len(relay.submit(0.0, 'a', 100)) == 1  # 100 bytes at 8 kbit/s: 100 ms on the wire
    assert relay.submit(0.01, 'b', 100) == []
    assert (relay.counters.dropped_injected, relay.counters.dropped_queue) == (1, 0)


def test_bounded_queue_tail_drops_beyond_capacity() -> None:
    relay = Relay(link(FixedDelay(10.0)), capacity=2)
    returned = [relay.submit(0.0, item, 64) for item in 'abcd']
    assert [len(r) for r in returned] == [1, 1, 0, 0]
    assert relay.in_flight() == 2
    assert relay.due(0.02) == ['a', 'b']
    assert len(relay.submit(0.03, 'e', 64)) == 1  # room again once released
    c = relay.counters
    assert (c.received, c.delivered, c.dropped_injected, c.dropped_queue) == (5, 2, 0, 2)


def test_duplicate_copies_beyond_capacity_are_tail_dropped() -> None:
    relay = Relay(link(Duplicate(p=1.0, extra_delay_ms=1.0)), capacity=3)
    assert relay.submit(0.0, 'a', 64) == [0.0, pytest.approx(0.001)]
    assert relay.submit(0.0, 'b', 64) == [0.0]
    assert relay.due(1.0) == ['a', 'b', 'a']
    assert relay.counters.dropped_queue == 1


def test_set_link_keeps_release_times_of_messages_in_flight() -> None:
    relay = Relay(link(FixedDelay(50.0)), capacity=10)
    relay.submit(0.0, 'slow', 64)
    relay.set_link(link(FixedDelay(10.0)))
    assert relay.submit(0.001, 'fast', 64) == [pytest.approx(0.011)]
    assert relay.due(0.02) == ['fast']
    assert relay.next_release_s() == pytest.approx(0.050)
    assert relay.due(0.05) == ['slow']


@pytest.mark.parametrize('time_scale', [1.0, 2.0, 10.0])
def test_time_scale_divides_every_delay(time_scale: float) -> None:
    relay = Relay(link(FixedDelay(20.0)), capacity=10, time_scale=time_scale)
    assert relay.submit(3.0, 'a', 64) == [pytest.approx(3.0 + 0.020 / time_scale)]


def test_time_scale_runs_stateful_models_in_model_time() -> None:
    """Bandwidth: 100 bytes take 8 ms of model time; at scale 4 two back-to-back ones leave 2 ms apart."""
    relay = Relay(link(Bandwidth(rate_kbps=100.0, queue_packets=10)), capacity=10, time_scale=4.0)
    assert relay.submit(1.0, 'a', 100) == [pytest.approx(1.002)]
    assert relay.submit(1.0, 'b', 100) == [pytest.approx(1.004)]


def test_latency_percentiles_cover_released_copies_in_a_bounded_window() -> None:
    relay = Relay(trace([10.0, 20.0, 30.0, 40.0]), capacity=10, window=3)
    assert relay.latencies_s() == [] and all(math.isnan(v) for v in percentiles_ms([]))
    for i in range(4):
        relay.submit(0.0, i, 64)
    relay.due(0.035)
    assert relay.latencies_s() == pytest.approx([0.010, 0.020, 0.030])
    relay.due(1.0)
    assert relay.latencies_s() == pytest.approx([0.020, 0.030, 0.040])
    assert percentiles_ms(relay.latencies_s(), (0, 50, 100)) == pytest.approx((20.0, 30.0, 40.0))


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_counters_balance_under_random_loss_duplication_and_overflow(seed: int) -> None:
    lnk = Link([GaussianDelay(20.0, 10.0), BernoulliLoss(0.2), Duplicate(0.3, 2.0)], np.random.default_rng(seed))
    relay = Relay(lnk, capacity=20)
    now_s = 0.0
    for i in range(2000):
        now_s = i * 0.001
        relay.submit(now_s, i, 64)
        relay.due(now_s)
    c = relay.counters
    assert c.dropped_injected > 0 and c.dropped_queue > 0
    copies = c.received + lnk.stats.duplicated
    assert copies == c.delivered + c.dropped_injected + c.dropped_queue + relay.in_flight()


@pytest.mark.parametrize('kwargs, fragment', [
    ({'capacity': 0}, 'got 0'),
    ({'capacity': 1.5}, 'got 1.5'),
    ({'time_scale': 0.0}, 'got 0.0'),
    ({'time_scale': -2.0}, 'got -2.0'),
    ({'time_scale': math.nan}, 'got nan'),
])
def test_invalid_arguments_name_the_value(kwargs: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        Relay(link(), **{'capacity': 10, **kwargs})


class Sink:
    """Records what a ReleaseThread sends, with the clock reading at each send."""

    def __init__(self, expected: int) -> None:
        self.items: list[tuple[object, float]] = []
        self.expected = expected
        self.done = threading.Event()

    def __call__(self, item: object) -> None:
        self.items.append((item, time.monotonic()))
        if len(self.items) >= self.expected:
            self.done.set()


def test_release_thread_sends_each_output_at_its_release_times() -> None:
    up, down = Sink(3), Sink(1)
    releaser = ReleaseThread([(Relay(link(FixedDelay(30.0)), 10), up), (Relay(link(FixedDelay(5.0)), 10), down)],
                             clock=time.monotonic)
    releaser.start()
    try:
        start = time.monotonic()
        for item in 'abc':
            releaser.submit(0, item, 64)
        releaser.submit(1, 'z', 64)
        assert up.done.wait(5.0) and down.done.wait(5.0)
    finally:
        releaser.stop()
    assert [item for item, _ in up.items] == ['a', 'b', 'c'] and down.items[0][0] == 'z'
    assert up.items[0][1] - start >= 0.030 and down.items[0][1] - start >= 0.005
    assert down.items[0][1] < up.items[0][1]  # the later-submitted, shorter delay went first
    assert releaser.stats(0).counters.delivered == 3


def test_release_thread_honours_the_receive_time_and_swaps_links() -> None:
    sink = Sink(2)
    releaser = ReleaseThread([(Relay(link(FixedDelay(10_000.0)), 10), sink)], clock=time.monotonic)
    releaser.start()
    try:
        releaser.set_links([link(FixedDelay(200.0))])
        start = time.monotonic()
        releaser.submit(0, 'old', 64, received_s=start - 0.2)  # received 200 ms ago: due now
        releaser.submit(0, 'new', 64)
        assert sink.done.wait(5.0)
    finally:
        releaser.stop()
    assert [item for item, _ in sink.items] == ['old', 'new']
    assert sink.items[0][1] - start < 0.15 <= sink.items[1][1] - start


def test_release_thread_stop_discards_messages_in_flight() -> None:
    sink = Sink(1)
    releaser = ReleaseThread([(Relay(link(FixedDelay(60_000.0)), 10), sink)], clock=time.monotonic)
    releaser.start()
    releaser.submit(0, 'never', 64)
    releaser.stop()
    assert sink.items == [] and releaser.stats(0).counters.received == 1
