"""Release scheduling for one direction of the shim: when may each relayed message go out?

`Relay` is pure: the caller passes the current time (float seconds, any monotonic clock) and
publishes what `due()` returns. A message submitted at `now_s` goes through the `Link` in model
time `now_s * time_scale`, and each surviving copy is released at
`now_s + (arrival - send) / time_scale`, so a time scale of 10 runs the same network ten times
faster. Not thread safe: the shim node calls it under one lock.

Drops are counted apart: `dropped_injected` holds everything the network model discards on
purpose (loss models and the bandwidth model's own queue); `dropped_queue` holds tail drops of
the relay's in-flight queue, which means the shim itself was overloaded.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from calf_shim.errors import ConfigError
from calf_shim.link import Link


@dataclass
class RelayCounters:
    """Counts of one direction: copies in + duplicated == delivered + dropped + in flight."""

    received: int = 0  # messages submitted
    delivered: int = 0  # copies handed out by due()
    dropped_injected: int = 0  # copies the network model dropped
    dropped_queue: int = 0  # copies tail-dropped because capacity copies were already in flight


class Relay:
    """A bounded queue of in-flight messages, each with a release time computed by a Link."""

    def __init__(self, link: Link, capacity: int, time_scale: float = 1.0, window: int = 10_000) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"queue capacity must be an integer >= 1, got {capacity!r}")
        if not (isinstance(time_scale, (int, float)) and math.isfinite(time_scale) and time_scale > 0):
            raise ConfigError(f"time_scale must be a finite number > 0, got {time_scale!r}")
        if window < 1:
            raise ConfigError(f"latency window must be >= 1, got {window!r}")
        self.link = link
        self.capacity = capacity
        self.time_scale = float(time_scale)
        self.counters = RelayCounters()
        self._heap: list[tuple[float, int, float, Any]] = []  # (release_s, order, submit_s, item)
        self._order = itertools.count()
        self._latencies_s: deque[float] = deque(maxlen=window)

    def submit(self, now_s: float, item: Any, size_bytes: int) -> list[float]:
        """Pass one message through the link; return the release times of the copies queued."""
        self.counters.received += 1
        if len(self._heap) >= self.capacity:
            self.counters.dropped_queue += 1
            return []
        before = self.link.stats.dropped_injected + self.link.stats.dropped_queue
        send_model_s = now_s * self.time_scale
        arrivals = self.link.transmit(send_model_s, size_bytes)
        self.counters.dropped_injected += self.link.stats.dropped_injected + self.link.stats.dropped_queue - before
        releases = [now_s + (arrive - send_model_s) / self.time_scale for arrive in arrivals]
        room = self.capacity - len(self._heap)
        self.counters.dropped_queue += max(len(releases) - room, 0)
        for release_s in releases[:room]:
            heapq.heappush(self._heap, (release_s, next(self._order), now_s, item))
        return releases[:room]

    def due(self, now_s: float) -> list[Any]:
        """Pop every copy whose release time is <= now_s, in release order (ties: submit order)."""
        out = []
        while self._heap and self._heap[0][0] <= now_s:
            release_s, _, submit_s, item = heapq.heappop(self._heap)
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

    def latency_percentiles_ms(self, qs: Iterable[float] = (50, 95, 99)) -> tuple[float, ...]:
        """Percentiles of (release - submit) over the latest released copies; NaN when there are none."""
        qs = tuple(qs)
        if not self._latencies_s:
            return tuple(math.nan for _ in qs)
        return tuple(float(v) * 1e3 for v in np.percentile(np.fromiter(self._latencies_s, float), qs))
