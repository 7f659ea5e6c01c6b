"""Losses before the shim, estimated from the sequence numbers of the observations it relays.

The env node sends one Observation per tick with ``seq`` counting ticks from 0 in each episode, so
a seq that skips ahead means observations that never reached the shim: the middleware (or the
network under it) lost them, whether or not Fast DDS reports the loss. ``read_observation_ids``
reads ``(run, episode, seq)`` from the serialized bytes without deserializing the message, and
``GapEstimator`` turns them into an estimate: a late arrival that fills a gap takes one back; a
jump larger than ``MAX_SEQ_JUMP`` (a forged or corrupt seq) counts as an anomaly, not as losses.
Losses at the tail of an episode cannot be seen (the next episode starts again from 0).
"""
from __future__ import annotations

import struct

from calf_core.timing import MAX_SEQ_JUMP


def read_observation_ids(data: bytes) -> tuple[int, int, int] | None:
    """``(run, episode, seq)`` of a serialized calf_msgs/Observation, or None if the bytes are too short.

    CDR: a 4-byte encapsulation header, then header.stamp (int32, uint32), header.frame_id (uint32
    length with the NUL, then the bytes), padding to 8 (counted from after the encapsulation),
    then seq (uint64), episode (uint32) and run (uint32).
    """
    if len(data) < 16:
        return None
    order = '<' if data[1] & 1 else '>'
    (length,) = struct.unpack_from(f'{order}I', data, 12)
    offset = 16 + length
    offset += -(offset - 4) % 8
    if offset + 16 > len(data):
        return None
    seq, episode, run = struct.unpack_from(f'{order}QII', data, offset)
    return run, episode, seq


class GapEstimator:
    """Counts observations missing from the (run, episode, seq) stream seen so far."""

    def __init__(self) -> None:
        self.lost = 0
        self.anomalies = 0
        self._key: tuple[int, int] | None = None
        self._last = -1

    def observe(self, run: int, episode: int, seq: int) -> None:
        """Account for one observation that reached the shim."""
        if (run, episode) != self._key:
            if self._key is not None and run == self._key[0] and episode < self._key[1]:
                return  # a straggler of an earlier episode
            self._key, self._last = (run, episode), -1
        if seq > self._last + 1 + MAX_SEQ_JUMP:
            self.anomalies += 1
            return
        if seq > self._last:
            self.lost += seq - self._last - 1
            self._last = seq
        elif seq < self._last and self.lost:
            self.lost -= 1  # a late arrival: one of the gaps was reordering, not loss
