"""Release scheduling for the shim: when may each relayed message go out, and who sends it?

`Relay` (one direction) is pure: the caller passes the current time (float seconds, any
monotonic clock) and publishes what `due()` returns. `ReleaseThread` drives several relays
from one thread that sleeps until the next release time; its clock and publish functions are
injected, so it needs no ROS. A message submitted at `now_s` goes through the `Link` in model
time `now_s * time_scale`, and each surviving copy is released at
`now_s + (arrival - send) / time_scale`, so a time scale of 10 runs the same network ten times
faster. `Relay` is not thread safe; `ReleaseThread` calls it under one lock.

Drops are counted apart: `dropped_injected` holds everything the network model discards on
purpose (loss models and the bandwidth model's own queue); `dropped_queue` holds tail drops of
the relay's in-flight queue (such a message never reaches the link), which means the shim
itself was overloaded. The queue is bounded twice: by `capacity` copies and by `capacity_bytes`
bytes in flight, so that large messages cannot grow the shim's memory past the byte budget.
"""
from __future__ import annotations

import heapq
import itertools
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from calf_core.errors import ConfigError
from calf_core.link import Link

DEFAULT_CAPACITY_BYTES = 64 * 1024 * 1024
"""Bytes in flight per relay before tail drops (the count bound alone lets large messages use gigabytes)."""


@dataclass
class RelayCounters:
    """Counts of one direction: received + link duplicates == delivered + both drops + in flight."""

    received: int = 0  # messages submitted
    delivered: int = 0  # copies handed out by due()
    dropped_injected: int = 0  # copies the network model dropped
    dropped_queue: int = 0  # copies tail-dropped because the queue's count or byte budget was full


class Relay:
    """A bounded queue of in-flight messages, each with a release time computed by a Link."""

    def __init__(self, link: Link, capacity: int, time_scale: float = 1.0, window: int = 10_000,
                 capacity_bytes: int = DEFAULT_CAPACITY_BYTES) -> None:
        for name, value in (('queue capacity', capacity), ('queue byte budget', capacity_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(time_scale, (int, float)) and math.isfinite(time_scale) and time_scale > 0):
            raise ConfigError(f"time_scale must be a finite number > 0, got {time_scale!r}")
        if window < 1:
            raise ConfigError(f"latency window must be >= 1, got {window!r}")
        self.link = link
        self.capacity, self.capacity_bytes = capacity, capacity_bytes
        self.bytes_in_flight = 0
        self.time_scale = float(time_scale)
        self.counters = RelayCounters()
        self._heap: list[tuple[float, int, float, int, Any]] = []  # (release_s, order, submit_s, size, item)
        self._order = itertools.count()
        self._latencies_s: deque[float] = deque(maxlen=window)
        self._last_submit_s = -math.inf

    def submit(self, now_s: float, item: Any, size_bytes: int) -> list[float]:
        """Pass one message through the link; return the release times of the copies queued.

        A `now_s` earlier than the previous submit counts as the previous submit's time, since
        callers may read the clock out of order (the link needs non-decreasing send times).
        """
        now_s = self._last_submit_s = max(now_s, self._last_submit_s)
        self.counters.received += 1
        size_bytes = max(int(size_bytes), 0)
        if len(self._heap) >= self.capacity or self.bytes_in_flight + size_bytes > self.capacity_bytes:
            self.counters.dropped_queue += 1
            return []
        before = self.link.stats.dropped_injected + self.link.stats.dropped_queue
        send_model_s = now_s * self.time_scale
        arrivals = self.link.transmit(send_model_s, size_bytes)
        self.counters.dropped_injected += self.link.stats.dropped_injected + self.link.stats.dropped_queue - before
        releases = [now_s + (arrive - send_model_s) / self.time_scale for arrive in arrivals]
        room = min(self.capacity - len(self._heap), (self.capacity_bytes - self.bytes_in_flight) // max(size_bytes, 1))
        self.counters.dropped_queue += max(len(releases) - room, 0)
        for release_s in releases[:room]:
            heapq.heappush(self._heap, (release_s, next(self._order), now_s, size_bytes, item))
            self.bytes_in_flight += size_bytes
        return releases[:room]

    def due(self, now_s: float) -> list[Any]:
        """Pop every copy whose release time is <= now_s, in release order (ties: submit order)."""
        out = []
        while self._heap and self._heap[0][0] <= now_s:
            release_s, _, submit_s, size_bytes, item = heapq.heappop(self._heap)
            self.bytes_in_flight -= size_bytes
            self._latencies_s.append(release_s - submit_s)
            out.append(item)
        self.counters.delivered += len(out)
        return out

    def next_release_s(self) -> float | None:
        """The earliest pending release time, or None when nothing is in flight."""
        return self._heap[0][0] if self._heap else None

    def in_flight(self) -> int:
        return len(self._heap)

    def set_link(self, link: Link) -> None:
        """Swap the network model; messages already in flight keep their release times."""
        self.link = link

    def latencies_s(self) -> list[float]:
        """(release - submit) of the latest released copies, oldest first (a copy of the bounded window)."""
        return list(self._latencies_s)


def percentiles_ms(samples_s: Sequence[float], qs: Iterable[float] = (50, 95, 99)) -> tuple[float, ...]:
    """Percentiles of delays given in seconds, in milliseconds; NaN when there are no samples."""
    qs = tuple(qs)
    if not samples_s:
        return tuple(math.nan for _ in qs)
    return tuple(float(v) * 1e3 for v in np.percentile(np.asarray(samples_s, float), qs))


class DirectionStats(NamedTuple):
    """A consistent snapshot of one relay's counters and latency percentiles (p50, p95, p99 in ms)."""

    counters: RelayCounters
    latency_ms: tuple[float, ...]


class ReleaseThread:
    """Sends each relay's messages at their release times, from one thread.

    `outputs[i]` pairs relay i with the function that sends what it releases. `clock()` returns
    monotonic seconds. Submitting wakes the thread only when the new release is the earliest.
    Sends happen outside the lock, so a slow send never blocks submitters.
    """

    def __init__(self, outputs: Sequence[tuple[Relay, Callable[[Any], None]]], clock: Callable[[], float]) -> None:
        self.outputs = tuple(outputs)
        self._clock = clock
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name='calf-release', daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def native_id(self) -> int | None:
        """The OS thread id once started (for scheduling policies)."""
        return self._thread.native_id

    def stop(self) -> None:
        """Stop and join; messages still in flight are discarded."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def submit(self, index: int, item: Any, size_bytes: int, received_s: float | None = None) -> list[float]:
        """Relay `item` on output `index`; it reached the shim at `received_s` (clock time, default now).

        Returns the release times of its copies (sorted; [] when dropped), as `Relay.submit` does."""
        with self._cond:
            earliest = self._next_release_s()
            now_s = self._clock() if received_s is None else received_s
            releases = self.outputs[index][0].submit(now_s, item, size_bytes)
            if releases and (earliest is None or min(releases) < earliest):
                self._cond.notify()
        return releases

    def set_links(self, links: Sequence[Link]) -> None:
        """Swap every relay's link at once; messages in flight keep their release times."""
        with self._cond:
            for (relay, _), link in zip(self.outputs, links):
                relay.set_link(link)

    def stats(self, index: int) -> DirectionStats:
        """Copy under the lock, compute percentiles outside it (the release thread keeps going)."""
        with self._cond:
            relay = self.outputs[index][0]
            counters, samples = replace(relay.counters), relay.latencies_s()
        return DirectionStats(counters, percentiles_ms(samples))

    def _next_release_s(self) -> float | None:
        times = [t for t in (relay.next_release_s() for relay, _ in self.outputs) if t is not None]
        return min(times, default=None)

    def _run(self) -> None:
        """Wait until the next release time, pop what is due, send it outside the lock."""
        while True:
            with self._cond:
                if self._stopping:
                    return
                now = self._clock()
                batches = [(send, relay.due(now)) for relay, send in self.outputs]
                if not any(items for _, items in batches):
                    earliest = self._next_release_s()
                    self._cond.wait(None if earliest is None else earliest - now)
                    continue
            for send, items in batches:
                for item in items:
                    send(item)
