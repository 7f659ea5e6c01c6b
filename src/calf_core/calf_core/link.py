"""One direction of a network link: a chain of model stages applied to each message.

Times are float seconds. A message enters as one `Packet` whose `arrive_s` equals its
`send_s`; each stage adds delay to it, drops it (returns no packets) or duplicates it
(returns several). Randomness comes only from the injected generator.

Most stages deliver each message at most once; they subclass `SingleCopyStage` and
implement `arrival` on plain floats. A chain of only such stages takes a fast path that
creates no `Packet`. Stages that delay or lose each message independently of the others and of
time (`IndependentStage`) draw their samples in blocks; a link draws the leading run of them
together, as one total delay per message.
"""
from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

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
        """Clear state (queues, Gilbert-Elliott state, trace offset, ...): a fresh process."""

    def apply(self, packet: Packet, rng: np.random.Generator) -> list[Packet]:
        """Return the packet's copies: [] = lost, one = delivered, two or more = duplicated."""


class SingleCopyStage(ABC):
    """A stage that delivers each packet once or loses it: `apply` follows from `arrival`."""

    queue_drops = False

    @abstractmethod
    def reset(self) -> None:
        """Clear state."""

    @abstractmethod
    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        """The packet's new planned arrival, or None if this stage loses it."""

    def apply(self, packet: Packet, rng: np.random.Generator) -> list[Packet]:
        arrive_s = self.arrival(packet.send_s, packet.arrive_s, packet.size_bytes, rng)
        if arrive_s is None:
            return []
        packet.arrive_s = arrive_s
        return [packet]


class DrawBuffer:
    """Values of ``draw(rng, n)`` drawn ``BLOCK`` at a time and handed out one by one.

    The same seed gives the same sequence. Each generator has its own block: a stage of a shared process
    takes from the generator of the link that meets it, so it alternates between two, and a switch keeps
    what is left of the other's block for its next turn. Only the last two generators' blocks are kept (a
    ``Link.reseed`` retires the old one).
    """

    BLOCK = 128

    def __init__(self, draw: Callable[[np.random.Generator, int], np.ndarray]) -> None:
        self._draw = draw
        self._rng: np.random.Generator | None = None
        self._values: list[float] = []
        self._next = 0
        self._other: tuple[np.random.Generator | None, list[float], int] = (None, [], 0)  # the other block

    def take(self, rng: np.random.Generator) -> float:
        i = self._next
        if rng is not self._rng:  # resume this generator's block, or start one
            other = self._other
            self._other = (self._rng, self._values, i)
            self._rng, self._values, i = other if other[0] is rng else (rng, [], 0)
        if i == len(self._values):
            self._values, i = self._draw(rng, self.BLOCK).tolist(), 0
        self._next = i + 1
        return self._values[i]

    def take_two(self, rng: np.random.Generator) -> tuple[float, float]:
        """``(take(rng), take(rng))`` in one call."""
        i = self._next
        values = self._values
        if i + 2 <= len(values) and rng is self._rng:
            self._next = i + 2
            return values[i], values[i + 1]
        return self.take(rng), self.take(rng)


class IndependentStage(SingleCopyStage):
    """A stage that delays or loses each packet independently of all others and of time.

    It defines `sample`; `arrival` takes the samples one by one from blocks. Subclasses call
    `super().__init__()` once their parameters are set.
    """

    def __init__(self) -> None:
        self._samples = DrawBuffer(self.sample)

    def reset(self) -> None:
        """Stateless."""

    @abstractmethod
    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` delays in seconds, NaN for a lost packet."""

    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        samples = self._samples
        i, values = samples._next, samples._values  # DrawBuffer.take, inlined
        if i < len(values) and rng is samples._rng:
            samples._next = i + 1
            delay_s = values[i]
        else:
            delay_s = samples.take(rng)
        return None if delay_s != delay_s else arrive_s + delay_s  # NaN: lost


class TimedStage(Protocol):
    """A process in time that a message meets at one instant (a stall, Gilbert-Elliott in time)."""

    def reset(self) -> None:
        """Start a fresh process."""

    def at(self, t: float, floor_s: float, rng: np.random.Generator) -> float | None:
        """The new time of a message met at ``t`` (None: lost); no later query lies before ``floor_s``."""


class SharedProcess:
    """Stages in time that both directions of one link meet, as one radio: ONE process per stage.

    Each direction ends its chain with ``end(direction)``: a message meets the shared stages after
    its direction's own stages, at its time at that point, so a stall holds both directions over the
    same interval and a Gilbert-Elliott bad state drops in both in the same periods. The process draws
    from the generator of the link that meets it. Both directions' sends only go forward, so the
    earlier of their latest sends bounds every later query (the floor the stages prune their history by).
    """

    def __init__(self, stages: Sequence[TimedStage]) -> None:
        self._stages = tuple(stages)
        self._last_send_s = [-np.inf, -np.inf]

    @property
    def stages(self) -> tuple[TimedStage, ...]:
        """The shared stages, in the order a message meets them."""
        return self._stages

    def end(self, direction: int) -> SharedEnd:
        """The stage that ends direction ``direction``'s chain (0: uplink, 1: downlink)."""
        return SharedEnd(self, direction)

    def reset(self) -> None:
        for stage in self._stages:
            stage.reset()
        self._last_send_s = [-np.inf, -np.inf]

    def meet(self, direction: int, send_s: float, t: float, rng: np.random.Generator) -> float | None:
        """The time a message of ``direction`` sent at ``send_s`` leaves the shared stages, met at ``t``."""
        return self.arrival(direction, send_s, t, 0, rng)

    def arrival(self, direction: int, send_s: float, t: float, size_bytes: int,
                rng: np.random.Generator) -> float | None:
        """``meet`` with a stage's ``arrival`` arguments after the direction (what ``SharedEnd`` calls)."""
        last = self._last_send_s
        last[direction] = send_s
        other = last[1 - direction]
        floor_s = other if -math.inf < other < send_s else send_s
        for stage in self._stages:
            t = stage.at(t, floor_s, rng)
            if t is None:
                return None
        return t


class SharedEnd(SingleCopyStage):
    """One direction's way into a ``SharedProcess``; resetting either end resets the shared process."""

    def __init__(self, process: SharedProcess, direction: int) -> None:
        self.process, self.direction = process, direction
        self.arrival = functools.partial(process.arrival, direction)  # the method below, one call less per message

    def reset(self) -> None:
        self.process.reset()

    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        return self.process.arrival(self.direction, send_s, arrive_s, size_bytes, rng)


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
        single = all(isinstance(stage, SingleCopyStage) for stage in self._stages)
        lead = 0  # the leading independent stages are drawn together: one total delay per message (NaN = lost)
        while single and lead < len(self._stages) and isinstance(self._stages[lead], IndependentStage):
            lead += 1
        independent = self._stages[:lead]
        self._lead = DrawBuffer(lambda rng, n: sum(stage.sample(rng, n) for stage in independent)) if lead else None
        self._single_chain = tuple((stage.arrival, stage) for stage in self._stages[lead:]) if single else None
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
        stats, rng = self.stats, self._rng
        stats.sent += 1
        if self._single_chain is not None:  # the per-message path: DrawBuffer.take inlined
            arrive_s = send_s
            lead = self._lead
            if lead is not None:
                i, values = lead._next, lead._values
                if i < len(values) and rng is lead._rng:
                    lead._next = i + 1
                    delay_s = values[i]
                else:
                    delay_s = lead.take(rng)
                if delay_s != delay_s:  # NaN: lost
                    stats.dropped_injected += 1
                    return []
                arrive_s = send_s + delay_s
            for arrival, stage in self._single_chain:
                arrive_s = arrival(send_s, arrive_s, size_bytes, rng)
                if arrive_s is None:
                    self._count_drop(stage)
                    return []
            if not self._reorder:
                if arrive_s < self._last_arrive_s:
                    arrive_s = self._last_arrive_s
                self._last_arrive_s = arrive_s
            stats.delivered += 1
            return [arrive_s]
        packets = [Packet(send_s, send_s, size_bytes)]
        for stage in self._stages:
            out: list[Packet] = []
            for packet in packets:
                copies = stage.apply(packet, self._rng)
                if not copies:
                    self._count_drop(stage)
                self.stats.duplicated += max(len(copies) - 1, 0)
                out.extend(copies)
            packets = out
        arrivals = sorted(p.arrive_s for p in packets)
        if not self._reorder and arrivals:
            arrivals = [max(t, self._last_arrive_s) for t in arrivals]
            self._last_arrive_s = arrivals[-1]
        self.stats.delivered += len(arrivals)
        return arrivals

    def _count_drop(self, stage: Stage) -> None:
        if getattr(stage, "queue_drops", False):
            self.stats.dropped_queue += 1
        else:
            self.stats.dropped_injected += 1

    def reseed(self, rng: np.random.Generator) -> None:
        """Draw from ``rng`` from now on; the link's state (stalls, burst state, queue, trace position,
        FIFO order, its clock) runs on. NetworkedEnv calls this on a seeded episode reset."""
        self._rng = rng

    def reset(self, rng: np.random.Generator | None = None) -> None:
        """Start a fresh link process: clear all stage state and counters; optionally swap the generator.

        Episodes do not call this: a link is one continuous process across episodes (see `reseed`)."""
        for stage in self._stages:
            stage.reset()
        if rng is not None:
            self._rng = rng
        self.stats = LinkCounters()
        self._last_send_s = -np.inf
        self._last_arrive_s = -np.inf
