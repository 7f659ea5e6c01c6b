"""The event core of virtual time: one event queue and the busy policy's keep-newest rule.

``NetworkedEnv`` and the hierarchy simulator (``calf_agent.placement_sim``) both run on these;
``calf_core.vector_networked`` applies the same rules to many envs at once, in numpy.

Events are ordered by (time, rank, order). Times are integer nanoseconds, so that equal times
compare equal. At one time, actions arriving at the env come first, then the env's tick, then
observations reaching a policy, then a busy policy becoming free (``Rank``). ``order`` is unique,
so payloads are never compared.
"""
from __future__ import annotations

import itertools
from heapq import heappop, heappush
from typing import Any, NamedTuple

ACTION, TICK, OBS, FREE = 0, 1, 2, 3
"""Ranks of events at equal times. TICK is never queued: the env ticks when nothing is due before it."""

_new = tuple.__new__


class Event(NamedTuple):
    """One scheduled event."""

    time_ns: int
    rank: int
    order: int
    payload: Any


class EventQueue:
    """A heap of events in (time, rank, order) order.

    The heap holds the events' fields as plain tuples, since building a NamedTuple costs more than the
    heap operation; ``pop`` returns an ``Event``.
    """

    def __init__(self) -> None:
        # read by hot loops: ``heap[0] < (time_ns, rank)`` is "due before"; entries unpack as an Event's fields,
        # and a hot loop may push ``(time_ns, rank, next(order), payload)`` itself
        self.heap: list[tuple[int, int, int, Any]] = []
        self.order = itertools.count()

    def push(self, time_ns: int, rank: int, payload: Any) -> None:
        heappush(self.heap, (time_ns, rank, next(self.order), payload))

    def due_before(self, time_ns: int, rank: int) -> bool:
        """Whether the next event comes before (``time_ns``, ``rank``)."""
        heap = self.heap
        return bool(heap) and heap[0] < (time_ns, rank)

    def pop(self) -> Event:
        return _new(Event, heappop(self.heap))

    def pop_at(self, time_ns: int, rank: int) -> list[Any]:
        """Take the events of ``rank`` due at ``time_ns`` off the head of the queue; their payloads, in order."""
        heap, payloads = self.heap, []
        while heap and heap[0][0] == time_ns and heap[0][1] == rank:
            payloads.append(heappop(heap)[3])
        return payloads

    def clear(self) -> None:
        self.heap.clear()

    def __len__(self) -> int:
        return len(self.heap)


class BusyPolicy:
    """A policy that computes one observation at a time and, while busy, keeps only the newest arrival.

    ``offer`` returns True when the policy is free to take the observation now (the caller then sets
    ``busy_until_ns`` to when it sends the action); otherwise the
    observation becomes the one waiting, and the first one kept in a busy spell schedules a FREE
    event (with ``free_payload``) for when the policy is free again, where the caller offers
    ``waiting``.
    """

    __slots__ = ('busy_until_ns', 'free_payload', 'queue', 'waiting')

    def __init__(self, queue: EventQueue, free_payload: Any = None) -> None:
        self.queue, self.free_payload = queue, free_payload
        self.busy_until_ns = 0
        self.waiting: Any = None

    def reset(self) -> None:
        self.busy_until_ns, self.waiting = 0, None

    def offer(self, time_ns: int, record: Any) -> bool:
        """True: take ``record`` now (nothing waits any more). False: busy; ``record`` waits as the newest."""
        if time_ns < self.busy_until_ns:
            if self.waiting is None:
                self.queue.push(self.busy_until_ns, FREE, self.free_payload)
            self.waiting = record
            return False
        self.waiting = None
        return True
