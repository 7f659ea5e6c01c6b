"""Messages lost between their publishers and a subscription's callback (``LinkStats.dropped_middleware``).

DDS numbers the samples of each writer 1, 2, 3, ..., and rclpy hands that number and the writer's id
to a callback that takes a message info (``publication_sequence_number``, ``publisher_gid``). A number
that skips ahead means samples that never reached this callback: dropped by the transport (a full
socket or shared-memory buffer), or overwritten in the reader's KEEP_LAST history before the executor
took them. Fast DDS reports only the first kind as lost (``message_lost``); under a flood the second
is most of the loss. ``MiddlewareLosses`` counts the gaps exactly, per writer; samples a writer sent
before the first one this subscription got are not counted (a late-joining reader never asked for
them), nor, until a later one arrives, those at the tail. Where the middleware gives no sequence
numbers, its ``message_lost`` reports are the count.

Pure: no rclpy. Bounded: ``MAX_WRITERS`` writers are tracked, the least recently heard forgotten first.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from calf_core.limits import add_count

MAX_WRITERS = 256
"""Writers whose last sequence number is kept; a forgotten one starts again from its next sample."""
MAX_GAP = 1 << 20
"""Largest jump of one writer's sequence number counted as losses; a larger one (forged) is an anomaly."""
UNSUPPORTED = (1 << 64) - 1
"""rmw's RMW_MESSAGE_INFO_SEQUENCE_NUMBER_UNSUPPORTED."""


class MiddlewareLosses:
    """Losses on one subscription: ``on_message`` for each sample taken, ``on_reported`` for each
    ``message_lost`` event; ``count`` is the larger of the two counts (each a lower bound of the losses;
    on Fast DDS the reported losses are among the gaps)."""

    def __init__(self, max_writers: int = MAX_WRITERS) -> None:
        self.gaps = 0  # samples missing from the writers' sequence numbers
        self.reported = 0  # samples the middleware reported lost
        self.anomalies = 0  # jumps beyond MAX_GAP, not counted
        self._max_writers = max_writers
        self._last: OrderedDict[Any, int] = OrderedDict()  # writer id -> its last sequence number taken

    @property
    def count(self) -> int:
        return max(self.gaps, self.reported)

    def on_message(self, info: Mapping[str, Any]) -> None:
        """Account for one sample taken, from its message info (rclpy's dict)."""
        seq, gid = info.get('publication_sequence_number'), info.get('publisher_gid')
        if seq is None or seq == UNSUPPORTED or not isinstance(gid, Mapping):
            return
        writer = bytes(gid.get('data', ()))
        last = self._last.pop(writer, None)
        if last is None or last < seq <= last + 1 + MAX_GAP:
            if last is not None:
                self.gaps = add_count(self.gaps, seq - last - 1)
            last = seq
        elif seq > last:
            self.anomalies += 1
        elif seq < last and self.gaps:
            self.gaps -= 1  # a late sample: one of the gaps was reordering, not loss
        self._last[writer] = last
        if len(self._last) > self._max_writers:
            self._last.popitem(last=False)

    def on_reported(self, change: int) -> None:
        """Account for a ``message_lost`` event's ``total_count_change`` (a negative change adds nothing)."""
        self.reported = add_count(self.reported, change)
