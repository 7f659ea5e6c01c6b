"""Network traces: the fate of every message in each direction, its statistics, and its replay.

A trace holds one row per message and direction: a sequence number, the send and receive times
(integer nanoseconds), the size, and whether the message was lost. Rows are kept in send order,
the order in which ``TraceReplay`` replays them. The module is pure: no rclpy, no message types;
``plot_trace`` writes a PNG. ``calf_core.network.resolve_network`` turns a trace bag into its replay profile.

Where the times come from, and the clocks they assume:

- ``synth_trace``: a profile's links in virtual time; one clock, exact.
- ``TraceMatcher`` (the recorder node): sent = when the recorder saw the message on the sender's
  side of the link, received = when it saw it on the receiver's side, both on the recorder's
  steady clock. No clock synchronisation is needed; the delay is the link between the two
  observation points (in Mode 2 on one host: the shim plus a local DDS hop).
- ``import_from_messages``: sent = the header stamp (sender's clock), received = the bag's log
  time on the receiving side (the recording host's clock); see its docstring for the clock rules.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from heapq import heappop, heappush
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from calf_core import atomic
from calf_core.errors import ConfigError, TraceError
from calf_core.profile_schema import compact_flags, compact_series

if TYPE_CHECKING:
    from calf_core.profiles import Profile

BAG_SUFFIXES = ('.mcap', '.db3')
STALL_MS = 100.0  # default: a gap in deliveries this long, while a message waits, is a stall
_LISTED_STALLS = 20  # trace_stats lists the first stalls only; counts cover all of them
MAX_DELAY_NS = 60 * 10**9  # a larger median delay means the stamps and log times use different clocks
_TAIL_LEVELS = (0.99, 0.995, 0.999)  # extra histogram edges, so that fitted profiles keep the p99


class Direction(IntEnum):
    """The values of calf_msgs/TraceSample.direction."""

    UPLINK = 0  # observations, env -> policy
    DOWNLINK = 1  # actions, policy -> env


class Sample(NamedTuple):
    """One trace row: calf_msgs/TraceSample as plain values."""

    direction: int
    seq: int  # message number within its direction
    sent_ns: int  # sender's clock
    received_ns: int  # receiver's (or recorder's) clock; 0 when lost
    size_bytes: int
    lost: bool


@dataclass(frozen=True)
class DirectionTrace:
    """The rows of one direction as int64/bool arrays, in send order."""

    seq: np.ndarray
    sent_ns: np.ndarray
    received_ns: np.ndarray
    size: np.ndarray
    lost: np.ndarray

    @classmethod
    def from_samples(cls, samples: Sequence[Sample]) -> DirectionTrace:
        rows = np.array(sorted(samples, key=lambda s: (s.sent_ns, s.seq)), dtype=np.int64).reshape(-1, 6)
        return cls(rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4], rows[:, 5].astype(bool))

    def __len__(self) -> int:
        return int(self.seq.size)

    @property
    def delays_ms(self) -> np.ndarray:
        """received - sent per row in milliseconds; NaN where lost."""
        return np.where(self.lost, np.nan, (self.received_ns - self.sent_ns) / 1e6)

    def samples(self, direction: Direction) -> list[Sample]:
        return [Sample(int(direction), int(q), int(s), int(r), int(z), bool(x))
                for q, s, r, z, x in zip(self.seq, self.sent_ns, self.received_ns, self.size, self.lost)]


@dataclass(frozen=True)
class Trace:
    """Both directions of a link."""

    uplink: DirectionTrace
    downlink: DirectionTrace

    @classmethod
    def from_samples(cls, samples: Iterable[Sample]) -> Trace:
        rows = list(samples)
        unknown = {s.direction for s in rows} - {int(d) for d in Direction}
        if unknown:
            raise TraceError(f'trace rows have unknown direction values {sorted(unknown)} (expected 0 or 1)')
        return cls(*(DirectionTrace.from_samples([s for s in rows if s.direction == d]) for d in Direction))

    def directions(self) -> dict[str, DirectionTrace]:
        return {'uplink': self.uplink, 'downlink': self.downlink}

    def samples(self) -> list[Sample]:
        return self.uplink.samples(Direction.UPLINK) + self.downlink.samples(Direction.DOWNLINK)

    def __len__(self) -> int:
        return len(self.uplink) + len(self.downlink)


# --- statistics -------------------------------------------------------------------------------

def burst_lengths(lost: np.ndarray) -> np.ndarray:
    """Lengths of the runs of consecutive losses, in send order."""
    edges = np.diff(np.concatenate(([0], lost.astype(np.int8), [0])))
    return np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)


def reordered_count(d: DirectionTrace) -> int:
    """Delivered messages that arrived before a message sent earlier."""
    received = d.received_ns[~d.lost]
    if received.size < 2:
        return 0
    return int(np.sum(received[1:] < np.maximum.accumulate(received)[:-1]))


def stalls(d: DirectionTrace, stall_ms: float = STALL_MS) -> list[tuple[int, int]]:
    """(start_ns, end_ns) of each stall: a gap between consecutive deliveries longer than stall_ms
    while some message had been waiting longer than stall_ms (sent at least stall_ms before the
    gap ended). Idle gaps, when nothing was sent, are not stalls."""
    received = np.sort(d.received_ns[~d.lost])
    if received.size < 2:
        return []
    threshold = int(stall_ms * 1e6)
    start, end = received[:-1], received[1:]
    sent = np.sort(d.sent_ns)
    waiting = np.searchsorted(sent, end - threshold, 'right') > np.searchsorted(sent, start, 'left')
    mask = (end - start > threshold) & waiting
    return list(zip(start[mask].tolist(), end[mask].tolist()))


def _latency(delays_ms: np.ndarray) -> dict[str, float] | None:
    if delays_ms.size == 0:
        return None
    p50, p95, p99 = np.percentile(delays_ms, [50, 95, 99])
    return {'p50': float(p50), 'p95': float(p95), 'p99': float(p99),
            'mean': float(delays_ms.mean()), 'max': float(delays_ms.max())}


def _burst_stats(lost: np.ndarray) -> dict[str, Any]:
    lengths = burst_lengths(lost)
    values, counts = np.unique(lengths, return_counts=True)
    return {'count': int(lengths.size), 'mean_length': float(lengths.mean()) if lengths.size else 0.0,
            'max_length': int(lengths.max()) if lengths.size else 0,
            'lengths': {str(int(v)): int(c) for v, c in zip(values, counts)}}


def _stall_stats(d: DirectionTrace, stall_ms: float, origin_ns: int) -> dict[str, Any]:
    found = stalls(d, stall_ms)
    durations_ms = [(end - start) / 1e6 for start, end in found]
    return {'count': len(found), 'total_ms': float(sum(durations_ms)), 'max_ms': max(durations_ms, default=0.0),
            'first': [{'start_s': (start - origin_ns) / 1e9, 'duration_ms': ms}
                      for (start, _), ms in zip(found[:_LISTED_STALLS], durations_ms)]}


def _direction_stats(d: DirectionTrace, stall_ms: float, origin_ns: int) -> dict[str, Any]:
    delays = d.delays_ms[~d.lost]
    lost = int(d.lost.sum())
    return {'messages': len(d), 'delivered': len(d) - lost, 'lost': lost,
            'loss_rate': lost / len(d) if len(d) else None,
            'latency_ms': _latency(delays), 'negative_delays': int(np.sum(delays < 0)),
            'reordered': reordered_count(d), 'loss_bursts': _burst_stats(d.lost),
            'stalls': _stall_stats(d, stall_ms, origin_ns)}


def trace_stats(trace: Trace, stall_ms: float = STALL_MS) -> dict[str, Any]:
    """Counts, latency p50/p95/p99, loss rate, loss-burst lengths and stalls per direction (JSON-ready)."""
    sent = np.concatenate([trace.uplink.sent_ns, trace.downlink.sent_ns])
    received = np.concatenate([d.received_ns[~d.lost] for d in (trace.uplink, trace.downlink)])
    origin = int(sent.min()) if sent.size else 0
    end = int(max(sent.max(initial=origin), received.max(initial=origin)))
    report: dict[str, Any] = {'samples': len(trace), 'duration_s': (end - origin) / 1e9,
                              'stall_threshold_ms': stall_ms}
    for name, d in trace.directions().items():
        report[name] = _direction_stats(d, stall_ms, origin)
    return report


# --- synthesis and import ---------------------------------------------------------------------

def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def message_sample(direction: Direction, seq: int, send_s: float, arrivals: Sequence[float],
                   size_bytes: int) -> Sample:
    """The row of one message sent at send_s: received at its first (sorted) arrival, lost without one."""
    received = _ns(arrivals[0]) if arrivals else 0
    return Sample(int(direction), seq, _ns(send_s), received, size_bytes, not arrivals)


MAX_SYNTH_MESSAGES = 2_000_000
"""Most observations ``synth_trace`` sends (a trace holds about 200 bytes per message and direction)."""


def synth_trace(profile: Profile, duration_s: float, dt_s: float = 0.02, seed: int = 0,
                size_bytes: int = 64) -> Trace:
    """A trace of ``profile``: an observation every dt_s for duration_s over the uplink; each
    delivered one is answered compute_ms after its first arrival over the downlink (as in
    ``sample_e2e``). Duplicates count once, at their first arrival."""
    if not (duration_s > 0 and dt_s > 0):
        raise ConfigError(f'synth_trace: duration_s and dt_s must be > 0, got {duration_s} and {dt_s}')
    if duration_s / dt_s > MAX_SYNTH_MESSAGES:
        raise ConfigError(f'synth_trace: {duration_s:g} s at one message every {dt_s:g} s is more than '
                          f'{MAX_SYNTH_MESSAGES} messages: shorten the duration or raise dt')
    uplink, downlink = profile.make_links(np.random.default_rng(seed))
    samples, pending, answers = [], [], count()  # pending: a heap of first arrivals not answered yet

    def answer() -> None:  # the earliest pending arrival, before any later send: the links go forward together
        send_s = heappop(pending) + profile.compute_ms / 1e3
        arrivals = downlink.transmit(send_s, size_bytes)
        samples.append(message_sample(Direction.DOWNLINK, next(answers), send_s, arrivals, size_bytes))

    for k in range(max(1, int(round(duration_s / dt_s)))):
        while pending and pending[0] <= k * dt_s:
            answer()
        arrivals = uplink.transmit(k * dt_s, size_bytes)
        samples.append(message_sample(Direction.UPLINK, k, k * dt_s, arrivals, size_bytes))
        if arrivals:
            heappush(pending, arrivals[0])
    while pending:
        answer()
    return Trace.from_samples(samples)


class ObsEvent(NamedTuple):
    """An Observation as recorded in a bag."""

    episode: int
    seq: int
    stamp_ns: int  # header.stamp: the env's tick time (sender clock)
    log_ns: int  # the bag's log time: when the recording host received it
    size_bytes: int
    final: bool  # terminated or truncated: no action answers it


class ActionEvent(NamedTuple):
    """An Action as recorded in a bag."""

    episode: int
    obs_seq: int
    stamp_ns: int  # header.stamp: when the policy sent it (sender clock)
    log_ns: int  # the bag's log time: when the recording host received it
    size_bytes: int


def _first_by_key(events: Iterable[Any], key: Any) -> dict[Any, Any]:
    """The earliest-logged event of each key: later copies are duplicates."""
    first: dict[Any, Any] = {}
    for event in sorted(events, key=lambda e: e.log_ns):
        first.setdefault(key(event), event)
    return first


def _send_times(keys: list[Any], stamps: dict[Any, int]) -> list[int]:
    """Each key's stamp; keys without one (lost messages) get a time interpolated between neighbours."""
    known = [i for i, k in enumerate(keys) if k in stamps]
    guess = np.interp(np.arange(len(keys)), known, [stamps[keys[i]] for i in known]) if known else []
    return [stamps[k] if k in stamps else int(g) for k, g in zip(keys, guess)]


def _rows(direction: Direction, keys: list[Any], stamps: dict[Any, int], received: dict[Any, Any]) -> list[Sample]:
    """One row per key in key (= send) order; a key absent from ``received`` is lost (size 0: unknown)."""
    rows = []
    for seq, (key, sent_ns) in enumerate(zip(keys, _send_times(keys, stamps))):
        event = received.get(key)
        rows.append(Sample(int(direction), seq, sent_ns, event.log_ns if event else 0,
                           event.size_bytes if event else 0, event is None))
    return rows


def _uplink_rows(observations: Sequence[ObsEvent]) -> list[Sample]:
    """Delivered observations, and the seqs missing inside each episode as losses."""
    received = _first_by_key(observations, lambda o: (o.episode, o.seq))
    spans: dict[int, tuple[int, int]] = {}
    for episode, seq in received:
        low, high = spans.get(episode, (seq, seq))
        spans[episode] = (min(low, seq), max(high, seq))
    keys = [(episode, s) for episode, (low, high) in sorted(spans.items()) for s in range(low, high + 1)]
    return _rows(Direction.UPLINK, keys, {k: o.stamp_ns for k, o in received.items()}, received)


def _downlink_rows(actions: Sequence[ActionEvent], expected: Iterable[tuple[int, int]],
                   sent_stamps: dict[tuple[int, int], int]) -> list[Sample]:
    """Delivered actions, and the expected (episode, obs_seq) keys never delivered as losses."""
    received = _first_by_key(actions, lambda a: (a.episode, a.obs_seq))
    stamps = {**sent_stamps, **{k: a.stamp_ns for k, a in received.items()}}
    return _rows(Direction.DOWNLINK, sorted(set(received) | set(expected)), stamps, received)


def _aligned(rows: list[Sample], label: str, min_delay_ms: float | None) -> list[Sample]:
    """Check that sent and received times share a clock, or shift them so the fastest delay is min_delay_ms."""
    delays = np.array([s.received_ns - s.sent_ns for s in rows if not s.lost], dtype=np.int64)
    if delays.size == 0:
        return rows
    if min_delay_ms is None:
        if not 0 <= np.median(delays) <= MAX_DELAY_NS:
            raise TraceError(f'{label}: the median delay is {np.median(delays) / 1e6:.6g} ms, so header stamps '
                             'and log times are not on one clock (CALF nodes stamp with their steady clock); '
                             'give a minimum delay (--min-delay-ms) to align them')
        return rows
    shift = int(round(min_delay_ms * 1e6)) - int(delays.min())
    return [s if s.lost else s._replace(received_ns=s.received_ns + shift) for s in rows]


def import_from_messages(observations: Sequence[ObsEvent], actions: Sequence[ActionEvent],
                         sent_actions: Sequence[ActionEvent] | None = None,
                         min_delay_ms: float | None = None) -> Trace:
    """Derive a trace from bagged Observation and Action messages.

    ``observations`` were logged on the policy side: uplink delay = log time - header stamp; a seq
    missing inside an episode is a lost observation (a loss after an episode's last logged
    observation cannot be seen). ``actions`` were logged on the env side: downlink delay = log time
    - header stamp. An action is lost when it is in ``sent_actions`` (logged on the policy side)
    but not in ``actions``. Without ``sent_actions``, every logged non-final observation that no
    action answers counts as a lost action: an upper bound, since a busy policy skips observations.

    Clocks: with ``min_delay_ms`` None, stamps and log times must be one clock (one host and one
    clock type, or hosts synchronised by NTP/PTP); a median delay below 0 or above 60 s is refused.
    CALF's nodes stamp with their steady clock and ``ros2 bag record`` logs system time, so for
    their bags give ``min_delay_ms``: each direction's delays are shifted so that its fastest
    message took min_delay_ms. That keeps jitter, stalls and loss exact and assumes the base
    latency; clock drift over the recording (tens of ppm) remains.
    """
    if sent_actions is None:
        expected, sent_stamps = [(o.episode, o.seq) for o in observations if not o.final], {}
    else:
        sent = _first_by_key(sent_actions, lambda a: (a.episode, a.obs_seq))
        expected, sent_stamps = list(sent), {k: a.stamp_ns for k, a in sent.items()}
    uplink = _aligned(_uplink_rows(observations), 'uplink', min_delay_ms)
    downlink = _aligned(_downlink_rows(actions, expected, sent_stamps), 'downlink', min_delay_ms)
    return Trace.from_samples(uplink + downlink)


# --- live matching (the recorder node's core) -------------------------------------------------

class _Pending(NamedTuple):
    seq: int
    size_bytes: int
    first_ns: int  # when the first copy was seen
    near: bool  # the first copy was the sender's side


class TraceMatcher:
    """Pairs the two copies of each message: the sender's side (near) and the receiver's (far).

    Times are the caller's clock when it saw each copy. A key names a message within its
    direction: (episode, seq) for observations, (episode, obs_seq) for actions. A message whose
    far copy does not follow within ``timeout_ns`` of the near one is lost. A far copy seen first
    waits the same time for its near copy; without one it is dropped and counted in
    ``unmatched`` (the recorder missed the near side). Copies of a message already resolved
    (duplicates, arrivals after the timeout) are counted in ``late``. Resolved keys are
    remembered for twice the timeout, so a restarted sender that reuses keys is traced afresh.
    At most ``max_pending`` messages wait; beyond that the oldest is dropped unrecorded and
    counted in ``overflow``.
    """

    def __init__(self, timeout_ns: int, max_pending: int = 10_000) -> None:
        if timeout_ns <= 0 or max_pending < 1:
            raise ConfigError(f'TraceMatcher: timeout_ns and max_pending must be > 0, got {timeout_ns}, {max_pending}')
        self.timeout_ns, self.max_pending = timeout_ns, max_pending
        self._pending: OrderedDict[tuple[int, Hashable], _Pending] = OrderedDict()  # oldest first
        self._done: OrderedDict[tuple[int, Hashable], int] = OrderedDict()  # key -> when resolved, oldest first
        self._next_seq = {d: 0 for d in Direction}
        self.late = self.unmatched = self.overflow = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def near(self, direction: Direction, key: Hashable, size_bytes: int, now_ns: int) -> Sample | None:
        """The sender's copy was seen: the sample if its far copy came first, else None."""
        return self._seen(direction, key, size_bytes, now_ns, near=True)

    def far(self, direction: Direction, key: Hashable, size_bytes: int, now_ns: int) -> Sample | None:
        """The receiver's copy was seen: the message's sample, or None while its near copy is missing."""
        return self._seen(direction, key, size_bytes, now_ns, near=False)

    def expire(self, now_ns: int) -> list[Sample]:
        """Samples of the messages whose far copy is overdue: lost. Forgets keys resolved long ago."""
        while self._done and now_ns - next(iter(self._done.values())) > 2 * self.timeout_ns:
            self._done.popitem(last=False)
        out = []
        while self._pending:
            k, p = next(iter(self._pending.items()))
            if now_ns - p.first_ns < self.timeout_ns:
                break
            self._resolve(k, now_ns)
            if p.near:
                out.append(Sample(int(k[0]), p.seq, p.first_ns, 0, p.size_bytes, True))
            else:
                self.unmatched += 1
        return out

    def _seen(self, direction: Direction, key: Hashable, size_bytes: int, now_ns: int, near: bool) -> Sample | None:
        k = (direction, key)
        pending = self._pending.get(k)
        if k in self._done or (pending is not None and pending.near == near):
            self.late += not near
            return None
        if pending is None:
            self._pending[k] = _Pending(self._next_seq[direction], size_bytes, now_ns, near)
            self._next_seq[direction] += 1
            if len(self._pending) > self.max_pending:
                self._resolve(next(iter(self._pending)), now_ns)
                self.overflow += 1
            return None
        self._resolve(k, now_ns)
        sent, received = (now_ns, pending.first_ns) if near else (pending.first_ns, now_ns)
        return Sample(int(direction), pending.seq, sent, received, pending.size_bytes, False)

    def _resolve(self, k: tuple[int, Hashable], now_ns: int) -> None:
        self._pending.pop(k, None)
        self._done[k] = now_ns


# --- profiles from traces ---------------------------------------------------------------------

def _reorders(trace: Trace) -> bool:
    return any(reordered_count(d) for d in (trace.uplink, trace.downlink))


def _replay_spec(d: DirectionTrace, label: str, mode: str, compact: bool) -> dict[str, Any]:
    if not len(d):
        raise TraceError(f'the trace has no {label} samples, so it cannot be replayed')
    delays = np.clip(np.nan_to_num(d.delays_ms, nan=0.0), 0.0, None)  # negative: clock offset, read as 0
    if compact:
        return {'model': 'trace_replay', 'delays_ms': compact_series(delays), 'lost': compact_flags(d.lost),
                'mode': mode}
    return {'model': 'trace_replay', 'delays_ms': delays.astype(np.float64), 'lost': d.lost.astype(bool),
            'mode': mode}


def _replay_dict(trace: Trace, name: str, mode: str, compute_ms: float, compact: bool) -> dict:
    return {'name': name, 'description': f'Replay of trace {name} ({mode}).', 'compute_ms': compute_ms,
            'reorder': _reorders(trace), 'uplink': [_replay_spec(trace.uplink, 'uplink', mode, compact)],
            'downlink': [_replay_spec(trace.downlink, 'downlink', mode, compact)]}


def replay_profile_dict(trace: Trace, name: str, mode: str = 'random_offset', compute_ms: float = 1.0,
                        compact: bool = True) -> dict:
    """The profile (as JSON- and YAML-ready data) that replays the trace: one ``trace_replay`` stage per
    direction, its series in the compact form (one string each), or as arrays with ``compact=False``.

    ``reorder`` is on only when the trace itself reordered messages; a FIFO trace replays FIFO.
    'random_offset' starts each episode (each link reset) at a seeded random row; 'loop' at row 0."""
    return _replay_dict(trace, name, mode, compute_ms, compact)


def _fit_direction(d: DirectionTrace, label: str, bins: int) -> list[dict[str, Any]]:
    delays = np.clip(d.delays_ms[~d.lost], 0.0, None)
    if delays.size == 0:
        raise TraceError(f'the trace has no delivered {label} messages to fit')
    levels = np.concatenate((np.linspace(0.0, 1.0, bins + 1), _TAIL_LEVELS))
    edges = np.unique(np.quantile(delays, levels))
    if edges.size < 2:
        edges = np.array([edges[0], edges[0] + 1e-3])
    counts, _ = np.histogram(delays, edges)
    stages: list[dict[str, Any]] = [{'model': 'empirical_delay', 'bins_ms': edges.tolist(),
                                     'probs': (counts / counts.sum()).tolist()}]
    lengths = burst_lengths(d.lost)
    if lengths.size:
        rate, p_bad_to_good = float(d.lost.mean()), 1.0 / float(lengths.mean())
        p_good_to_bad = min(1.0, rate * p_bad_to_good / (1.0 - rate)) if rate < 1.0 else 1.0
        stages.append({'model': 'gilbert_elliott', 'p_good_to_bad': p_good_to_bad,
                       'p_bad_to_good': p_bad_to_good, 'loss_good': 0.0, 'loss_bad': 1.0})
    return stages


def fit_profile_dict(trace: Trace, name: str, bins: int = 50, compute_ms: float = 1.0) -> dict:
    """A compact profile fitted to the trace, per direction: an empirical delay histogram with
    quantile bins (stalls and spikes included), then Gilbert-Elliott loss with the trace's loss
    rate and mean burst length (loss_bad = 1, loss_good = 0). Delays are drawn independently and
    ``reorder`` is on: the recorded delays already hold any head-of-line blocking, and a FIFO link
    would add it a second time."""
    return {'name': name, 'description': f'Fitted to trace {name}: empirical delay, Gilbert-Elliott loss.',
            'compute_ms': compute_ms, 'reorder': True,
            'uplink': _fit_direction(trace.uplink, 'uplink', bins),
            'downlink': _fit_direction(trace.downlink, 'downlink', bins)}


def is_bag_path(name_or_path: str | Path) -> bool:
    """A .mcap or .db3 path, or a directory holding a rosbag2 bag."""
    path = Path(name_or_path)
    if path.suffix in BAG_SUFFIXES:
        return True
    return path.is_dir() and ((path / 'metadata.yaml').is_file() or any(
        f.suffix in BAG_SUFFIXES for f in path.iterdir()))


# --- plot -------------------------------------------------------------------------------------

def plot_trace(trace: Trace, png: str | Path, title: str = '') -> None:
    """Latency over time (lost messages as ticks on the top edge) and the latency CDF, per direction.

    The PNG replaces ``png`` whole; its directory must exist (a one-line ConfigError otherwise)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state

    fig = Figure(figsize=(11, 4), layout='constrained')
    over_time, cdf = fig.subplots(1, 2)
    sent = np.concatenate([trace.uplink.sent_ns, trace.downlink.sent_ns])
    origin = sent.min() if sent.size else 0
    for (name, d), color in zip(trace.directions().items(), ('tab:blue', 'tab:orange')):
        delays = d.delays_ms[~d.lost]
        over_time.plot((d.sent_ns[~d.lost] - origin) / 1e9, delays, '.', ms=2, color=color, label=name)
        over_time.plot((d.sent_ns[d.lost] - origin) / 1e9, np.ones(int(d.lost.sum())), '|', color=color,
                       transform=over_time.get_xaxis_transform(), ms=8)
        if delays.size:
            cdf.step(np.sort(delays), np.arange(1, delays.size + 1) / delays.size, where='post', color=color,
                     label=f'{name} (lost {d.lost.mean():.1%})')
    over_time.set(xlabel='send time (s)', ylabel='latency (ms)', title='latency over time (| = lost)')
    cdf.set(xlabel='latency (ms)', ylabel='fraction of delivered messages', title='latency CDF')
    for ax in (over_time, cdf):
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    with atomic.replacing(Path(png), 'wb') as stream:
        fig.savefig(stream, format='png', dpi=120)
