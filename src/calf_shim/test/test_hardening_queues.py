"""Adversarial load (class 4): the relay queue is bounded in bytes as well as in count, every drop is
counted, and the memory a flood of large messages takes is bounded by the byte budget."""
from __future__ import annotations

import gc
import threading
import tracemalloc

import numpy as np
import pytest

from calf_core.errors import ConfigError
from calf_core.link import Link
from calf_core.models import FixedDelay
from calf_shim.relay import Relay, ReleaseThread


def delayed(ms: float) -> Link:
    return Link([FixedDelay(ms)], np.random.default_rng(0))


@pytest.mark.parametrize('size', [1, 1000, 400_000, 5_000_000])
def test_bytes_in_flight_never_exceed_the_budget(size: int) -> None:
    budget = 4_000_000
    relay = Relay(delayed(1000.0), capacity=1000, capacity_bytes=budget)
    peak = 0
    for k in range(2000):
        relay.submit(k * 1e-3, b'', size)
        peak = max(peak, relay.bytes_in_flight)
    assert peak <= budget
    c = relay.counters
    assert c.received == 2000 and c.dropped_queue == 2000 - relay.in_flight()
    assert relay.in_flight() == min(1000, budget // size)
    relay.due(10.0)
    assert relay.bytes_in_flight == 0 and relay.counters.delivered == min(1000, budget // size)


def test_the_count_bound_still_holds_for_small_messages() -> None:
    relay = Relay(delayed(1000.0), capacity=10, capacity_bytes=1 << 30)
    for k in range(100):
        relay.submit(k * 1e-3, b'x', 1)
    assert relay.in_flight() == 10 and relay.counters.dropped_queue == 90


@pytest.mark.parametrize('bad', [0, -1, 1.5, True, '64M'])
def test_a_bad_byte_budget_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match='queue byte budget must be an integer >= 1'):
        Relay(delayed(1.0), 10, capacity_bytes=bad)  # type: ignore[arg-type]


def test_a_flood_of_400kb_messages_stays_within_the_byte_budget_and_releases_its_memory() -> None:
    """The release thread relays real 400 kB payloads; Python-level memory stays near the budget."""
    budget = 8_000_000
    sent = []
    done = threading.Event()
    clock = [0.0]
    relay = Relay(delayed(50.0), capacity=1000, capacity_bytes=budget)

    def send(item: bytes) -> None:
        sent.append(len(item))
        if len(sent) >= 20:
            done.set()

    thread = ReleaseThread([(relay, send)], clock=lambda: clock[0])
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        thread.start()
        for _ in range(500):  # 200 MB offered, all before the first release
            thread.submit(0, bytes(400_000), 400_000, received_s=0.0)
        peak = tracemalloc.get_traced_memory()[1] - base
        clock[0] = 1.0
        thread.submit(0, b'', 0, received_s=1.0)  # wakes the thread: everything is due
        assert done.wait(10.0)
        thread.stop()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert peak < budget + 2 * 400_000 + 1_000_000, f'peak {peak} bytes'
    assert after < 1_000_000, f'{after} bytes kept after the flood'
    c = relay.counters
    assert c.received == 501 and c.delivered == budget // 400_000
    assert c.dropped_queue == c.received - c.delivered  # the wake-up message too: the budget was full
    assert sum(sent) == (budget // 400_000) * 400_000
