"""One direction of a network link: a chain of model stages applied to each message.

Times are float seconds. A message enters as one `Packet` whose `arrive_s` equals its
`send_s`; each stage adds delay to it, drops it (returns no packets) or duplicates it
(returns several). Randomness comes only from the injected generator.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np


@dataclass
class Packet:
    """One copy of a message in flight."""

    send_s: float  # when the sender sent it
    arrive_s: float  # current planned arrival (stages add to it)
    size_bytes: int


class Stage(Protocol):
    """One impairment. A stage may set `queue_drops = True` to count its drops as queue drops."""

    def reset(self) -> None:
        """Clear state (queues, Gilbert-Elliott state, trace offset, ...)."""

    def apply(self, packet: Packet, rng: np.random.Generator) -> list[Packet]:
        """Return the packet's copies: [] = lost, one = delivered, two or more = duplicated."""


@dataclass
class LinkCounters:
    """Per-copy counters: sent + duplicated == delivered + dropped_injected + dropped_queue."""

    sent: int = 0  # messages handed to transmit()
    delivered: int = 0  # copies that arrived
    dropped_injected: int = 0  # copies dropped by a loss model
    dropped_queue: int = 0  # copies tail-dropped by a full bandwidth queue
    duplicated: int = 0  # extra copies made by duplication


class Link:
    """A chain of stages for one direction. An empty chain is an ideal link (arrival = send)."""

    def __init__(self, stages: Sequence[Stage], rng: np.random.Generator, reorder: bool = True) -> None:
        self._stages = tuple(stages)
        self._rng = rng
        self._reorder = reorder
        self.stats = LinkCounters()
        self._last_send_s = -np.inf
        self._last_arrive_s = -np.inf

    def transmit(self, send_s: float, size_bytes: int = 64) -> list[float]:
        """Send one message; return its sorted arrival times, or [] if it was lost.

        Calls must have non-decreasing `send_s`. With `reorder=False` no copy arrives
        before a copy of an earlier message (FIFO).
        """
        if send_s < self._last_send_s:
            raise ValueError(f"transmit: send_s must be non-decreasing, got {send_s} after {self._last_send_s}")
        self._last_send_s = send_s
        self.stats.sent += 1
        packets = [Packet(send_s, send_s, size_bytes)]
        for stage in self._stages:
            out: list[Packet] = []
            for packet in packets:
                copies = stage.apply(packet, self._rng)
                if not copies:
                    if getattr(stage, "queue_drops", False):
                        self.stats.dropped_queue += 1
                    else:
                        self.stats.dropped_injected += 1
                self.stats.duplicated += max(len(copies) - 1, 0)
                out.extend(copies)
            packets = out
        arrivals = sorted(p.arrive_s for p in packets)
        if not self._reorder and arrivals:
            arrivals = [max(t, self._last_arrive_s) for t in arrivals]
            self._last_arrive_s = arrivals[-1]
        self.stats.delivered += len(arrivals)
        return arrivals

    def reset(self, rng: np.random.Generator | None = None) -> None:
        """Clear all stage state and counters; optionally swap the generator (per-episode reseeding)."""
        for stage in self._stages:
            stage.reset()
        if rng is not None:
            self._rng = rng
        self.stats = LinkCounters()
        self._last_send_s = -np.inf
        self._last_arrive_s = -np.inf
