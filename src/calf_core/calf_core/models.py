"""Network model stages: delay, loss, stalls, bandwidth, duplication and trace replay.

Each stage is a small class following `calf_core.link.Stage`. `build_stage` validates a spec
against the profile schema (`calf_core.profile_schema`: keys, types, units, bounds) before a
constructor runs; constructors take validated values. Delays are
additive: chain `FixedDelay` with a jitter stage to get a base latency plus jitter.
Parameters are in milliseconds (`*_ms`); packet times are in seconds. Random numbers are drawn
in blocks (`DrawBuffer`): the same seed gives the same sequence, at a fraction of the cost of one
generator call per number.

`build_stage({"model": "gaussian_delay", "mean_ms": 25, "std_ms": 28})` builds a stage from
a profile spec; `MODELS` maps each model name to its class.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from enum import Enum
from typing import Any

import numpy as np

from calf_core.link import DrawBuffer, IndependentStage, Packet, SingleCopyStage, Stage
from calf_core.profile_schema import check_stage, dist_mean

MAX_RENEWALS = 512
"""Most stall windows a stall stage keeps, and most renewals (windows, level holds) it draws for one
message. When a message lies further ahead of the process than that many mean cycles (a long idle link,
a message held far back upstream), the process re-enters its stationary regime that many cycles before
the message, as it entered it at the first: the cost per message stays bounded whatever the numbers."""


class FixedDelay(IndependentStage):
    """Adds a constant latency."""

    MODEL = "fixed_delay"

    def __init__(self, latency_ms: float) -> None:
        self.latency_s = latency_ms / 1e3
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.latency_s)


class GaussianDelay(IndependentStage):
    """Adds N(mean_ms, std_ms) delay, truncated to >= 0 by resampling (not clipping)."""

    MODEL = "gaussian_delay"

    def __init__(self, mean_ms: float, std_ms: float) -> None:
        self.mean_ms, self.std_ms = mean_ms, std_ms
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        delay_ms = rng.normal(self.mean_ms, self.std_ms, n)
        negative = np.flatnonzero(delay_ms < 0.0)
        while negative.size:
            delay_ms[negative] = rng.normal(self.mean_ms, self.std_ms, negative.size)
            negative = negative[delay_ms[negative] < 0.0]
        return delay_ms / 1e3


class LogNormalDelay(IndependentStage):
    """Adds median_ms * exp(sigma * Z), Z ~ N(0, 1): median = median_ms, p95 = median_ms * exp(1.645 sigma)."""

    MODEL = "lognormal_delay"

    def __init__(self, median_ms: float, sigma: float) -> None:
        self.median_ms, self.sigma = median_ms, sigma
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.median_ms * np.exp(self.sigma * rng.standard_normal(n)) / 1e3


class GammaDelay(IndependentStage):
    """Adds a gamma-distributed delay: mean_ms and std_ms, or shape and scale_ms (mean = shape * scale_ms)."""

    MODEL = "gamma_delay"

    def __init__(self, mean_ms: float | None = None, std_ms: float | None = None, shape: float | None = None,
                 scale_ms: float | None = None) -> None:
        if shape is None or scale_ms is None:
            shape, scale_ms = (mean_ms / std_ms) ** 2, std_ms**2 / mean_ms
        self.shape, self.scale_ms = shape, scale_ms
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.gamma(self.shape, self.scale_ms, n) / 1e3


class ParetoDelay(IndependentStage):
    """Adds a Pareto (type I) delay with minimum scale_ms and tail index shape.

    P(delay > x) = (scale_ms / x) ** shape for x >= scale_ms, so the median is
    scale_ms * 2 ** (1 / shape) and the p95 is scale_ms * 20 ** (1 / shape).
    The mean is finite only for shape > 1 and the variance only for shape > 2.
    """

    MODEL = "pareto_delay"

    def __init__(self, scale_ms: float, shape: float) -> None:
        self.scale_ms, self.shape = scale_ms, shape
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.scale_ms * (1.0 + rng.pareto(self.shape, n)) / 1e3


class EmpiricalDelay(IndependentStage):
    """Adds a delay from a histogram: pick bin i with weight probs[i], then uniform in [bins_ms[i], bins_ms[i+1]).

    `bins_ms` are the len(probs) + 1 increasing bin edges; `probs` are normalised to sum 1.
    """

    MODEL = "empirical_delay"

    def __init__(self, bins_ms: Sequence[float], probs: Sequence[float]) -> None:
        edges, weights = [float(edge) for edge in bins_ms], [float(p) for p in probs]
        total = sum(weights)
        self.edges_ms = np.asarray(edges)
        self.cumulative = np.cumsum(weights) / total
        self.cumulative[-1] = 1.0
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        i = np.searchsorted(self.cumulative, rng.random(n), side="right")
        low, high = self.edges_ms[i], self.edges_ms[i + 1]
        return (low + (high - low) * rng.random(n)) / 1e3


class BernoulliLoss(IndependentStage):
    """Drops each packet independently with probability p."""

    MODEL = "bernoulli_loss"

    def __init__(self, p: float) -> None:
        self.p = p
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.where(rng.random(n) < self.p, np.nan, 0.0)


def _uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random(n)


class GilbertElliottLoss(SingleCopyStage):
    """Burst loss: a two-state Markov chain stepped once per packet.

    Each packet is lost with the current state's loss probability, then the state moves
    (good -> bad with p_good_to_bad, bad -> good with p_bad_to_good). The first packet the link
    carries draws its state from the stationary distribution; the chain then runs on across
    episodes, so the long-run loss rate is
    pi_bad * loss_bad + (1 - pi_bad) * loss_good with pi_bad = p_gb / (p_gb + p_bg).
    The mean burst (bad-state) length is 1 / p_bad_to_good packets.
    """

    MODEL = "gilbert_elliott"

    def __init__(self, p_good_to_bad: float, p_bad_to_good: float, loss_good: float, loss_bad: float) -> None:
        self.p_good_to_bad, self.p_bad_to_good = p_good_to_bad, p_bad_to_good
        self.loss_good, self.loss_bad = loss_good, loss_bad
        self.pi_bad = self.p_good_to_bad / (self.p_good_to_bad + self.p_bad_to_good)
        self._bad: bool | None = None
        self._uniform = DrawBuffer(_uniforms)

    @property
    def loss_rate(self) -> float:
        """Stationary (long-run) loss probability."""
        return self.pi_bad * self.loss_bad + (1.0 - self.pi_bad) * self.loss_good

    def reset(self) -> None:
        self._bad = None

    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        uniform, bad = self._uniform, self._bad
        if bad is None:
            bad = uniform.take(rng) < self.pi_bad
        i, values = uniform._next, uniform._values  # DrawBuffer.take_two, inlined
        if i + 2 <= len(values) and rng is uniform._rng:
            uniform._next = i + 2
            loss_draw, flip_draw = values[i], values[i + 1]
        else:
            loss_draw, flip_draw = uniform.take_two(rng)
        if bad:
            self._bad = flip_draw >= self.p_bad_to_good
            return None if loss_draw < self.loss_bad else arrive_s
        self._bad = flip_draw < self.p_good_to_bad
        return None if loss_draw < self.loss_good else arrive_s


class Distribution:
    """A positive random duration in seconds: fixed, uniform, exponential or lognormal (see profile_schema).

    ``sample`` draws one value; ``residual`` draws the time left of one in progress at a random
    instant (the equilibrium residual: a length-biased draw times a uniform), which starts a
    renewal process in its stationary state instead of at a renewal.
    """

    def __init__(self, spec: dict[str, Any], scale: float = 1e-3) -> None:
        self.kind = spec['dist']
        self.params = {k: float(v) * (1.0 if k == 'sigma' else scale) for k, v in spec.items() if k != 'dist'}
        self.mean = dist_mean({'dist': self.kind, **self.params})

    def sample(self, rng: np.random.Generator) -> float:
        p = self.params
        if self.kind == 'fixed':
            return p['value']
        if self.kind == 'uniform':
            return float(rng.uniform(p['low'], p['high']))
        if self.kind == 'exponential':
            return float(rng.exponential(p['mean']))
        return p['median'] * math.exp(p['sigma'] * float(rng.standard_normal()))

    def biased(self, rng: np.random.Generator) -> float:
        """A length-biased draw: the length of the one in progress at a random instant."""
        p = self.params
        if self.kind == 'fixed':
            return p['value']
        if self.kind == 'uniform':
            low, high = p['low'], p['high']
            return math.sqrt(low * low + float(rng.random()) * (high * high - low * low))
        if self.kind == 'exponential':
            return float(rng.gamma(2.0, p['mean']))
        return p['median'] * math.exp(p['sigma'] ** 2 + p['sigma'] * float(rng.standard_normal()))

    def residual(self, rng: np.random.Generator) -> float:
        p, u = self.params, float(rng.random())
        if self.kind == 'fixed':
            return u * p['value']
        if self.kind == 'uniform':  # length-biased uniform: density proportional to x on [low, high]
            low, high = p['low'], p['high']
            return u * math.sqrt(low * low + float(rng.random()) * (high * high - low * low))
        if self.kind == 'exponential':  # memoryless
            return float(rng.exponential(p['mean']))
        biased = p['median'] * math.exp(p['sigma'] ** 2 + p['sigma'] * float(rng.standard_normal()))
        return u * biased  # length-biased lognormal: lognormal(mu + sigma^2, sigma)


class StallMode(str, Enum):
    PERIODIC = "periodic"
    RANDOM = "random"


class OnOff:
    """Windows in time (stalls, bad states) and the time between them, as one renewal process.

    Each window lasts a draw of ``duration``; the next starts a draw of ``gap`` after its end, or a draw
    of ``period`` after its start (start to start; a window that starts before the previous one ended
    merges with it). The process starts at the first query, at a random phase of its stationary regime
    (the equilibrium residual of the window or gap in progress), and then runs on. It keeps at most
    ``MAX_RENEWALS`` windows and draws at most that many cycles for one query (see MAX_RENEWALS).
    """

    def __init__(self, duration: Distribution, gap: Distribution | None = None,
                 period: Distribution | None = None) -> None:
        self.duration, self.gap, self.period = duration, gap, period
        if gap is not None:
            self.on_fraction = duration.mean / (duration.mean + gap.mean)
            self._cycle_s = duration.mean + gap.mean
        else:
            assert period is not None
            self.on_fraction = min(duration.mean / period.mean, 1.0)
            self._cycle_s = period.mean
        self.reset()

    def reset(self) -> None:
        self._started = False
        self._starts: list[float] = []  # the windows, in time order and disjoint: starts and ends
        self._ends: list[float] = []
        self._head = 0  # windows before this one ended before the floor: no later query is in them
        self._next_start_s = math.inf
        self._clear_from = math.inf  # no window holds a time from here to the next start (none before the start)

    def release(self, t: float, floor_s: float, rng: np.random.Generator) -> float:
        """The end of the window holding time ``t``, else ``t``; no later query will lie before ``floor_s``."""
        if self._clear_from <= t < self._next_start_s:  # past every window drawn, before the next: nothing to do
            return t
        if not self._started:
            self._start(floor_s, rng)
        if self._next_start_s <= t:
            self._extend(t, rng)
        starts, ends, head = self._starts, self._ends, self._head
        while head < len(ends) and ends[head] <= floor_s:
            head += 1  # later queries lie after the floor, so never in these windows
        if head > MAX_RENEWALS and 2 * head > len(ends):
            del starts[:head], ends[:head]
            head = 0
        self._head = head
        i = bisect_right(starts, t, head) - 1
        if i < head or t >= ends[i]:
            return t
        if i == len(ends) - 1:  # the last window: the next may start before it ends and merge with it
            self._close(rng)
        return ends[i]

    def drawn(self, t: float, floor_s: float, rng: np.random.Generator) -> tuple[list[float], list[float], float]:
        """Draw the process up to time ``t`` at least (as ``release`` would) and the windows up to then to their
        ends; return the windows a query at or after ``floor_s`` may lie in (starts, ends) and the time up to
        which they are all known (the next start, after the last window's end). The vector env caches them in
        arrays and asks again only past that time."""
        self.release(t, floor_s, rng)
        self._close(rng)
        return self._starts[self._head:], self._ends[self._head:], self._next_start_s

    def _close(self, rng: np.random.Generator) -> None:
        """Draw on until the next window starts after the last one ends (merging those that start before),
        at most MAX_RENEWALS cycles: the last window's end is then final."""
        ends = self._ends
        for _ in range(MAX_RENEWALS):
            if not ends or self._next_start_s >= ends[-1]:
                return
            self._extend(ends[-1], rng)

    @property
    def cycle_s(self) -> float:
        """The mean time from one window's start to the next."""
        return self._cycle_s

    def _extend(self, t: float, rng: np.random.Generator) -> None:
        """Draw the windows up to time t (see MAX_RENEWALS); keep at most MAX_RENEWALS of them."""
        horizon = MAX_RENEWALS * self._cycle_s
        if t - self._next_start_s > horizon:
            self._start(t - horizon, rng)
        starts, ends, period = self._starts, self._ends, self.period
        while self._next_start_s <= t:
            start = self._next_start_s
            end = start + self.duration.sample(rng)
            if period is None:
                self._next_start_s = end + self.gap.sample(rng)
            else:
                self._next_start_s = start + period.sample(rng)
                if ends and start < ends[-1]:  # overlaps the previous window: one longer window
                    ends[-1] = max(ends[-1], end)
                    self._head = min(self._head, len(ends) - 1)
                    continue
            starts.append(start)
            ends.append(end)
        self._head = max(self._head, len(ends) - MAX_RENEWALS)
        if ends:
            self._clear_from = ends[-1]

    def _start(self, now_s: float, rng: np.random.Generator) -> None:
        """Enter the process at a random instant of its stationary regime."""
        self._started = True
        if self.period is not None:  # the start-to-start interval in progress, its age, the last window's length
            length = self.period.biased(rng)
            age = float(rng.random()) * length
            duration = self.duration.sample(rng)
            if duration > age:
                self._starts.append(now_s)
                self._ends.append(now_s + duration - age)
            self._next_start_s = now_s + length - age
        elif float(rng.random()) < self.on_fraction:
            end = now_s + self.duration.residual(rng)
            self._starts.append(now_s)
            self._ends.append(end)
            self._next_start_s = end + self.gap.sample(rng)
        else:
            self._next_start_s = now_s + self.gap.residual(rng)
        self._clear_from = self._ends[-1] if self._ends else now_s


class Stall(SingleCopyStage):
    """Link outages: a packet whose arrival falls inside a stall window is released at its end.

    Stalls and the time between them form one renewal process (``OnOff``): each stall lasts a draw of
    ``duration_ms``; the next one starts a draw of ``gap_ms`` after its end, or a draw of ``period_ms``
    after its start when ``period_ms`` is a distribution (start to start). Either is a number (fixed) or
    a distribution (see ``calf_core.profile_schema``). A number ``period_ms`` (or ``rate_hz``) is the
    older form: the mean time from one stall start to the next, and a mode: 'periodic' fixes the gap at
    period - mean duration, 'random' makes it exponential with that mean.

    The process starts at the first packet the link carries, at a random phase (in its stationary
    state), and then runs on: it does not restart at an episode boundary. A stall shared by both
    directions (``calf_core.link.SharedProcess``) is queried through ``at``.
    """

    MODEL = "stall"

    def __init__(
        self,
        duration_ms: float | dict[str, Any],
        gap_ms: float | dict[str, Any] | None = None,
        period_ms: float | dict[str, Any] | None = None,
        rate_hz: float | None = None,
        mode: str = "periodic",
    ) -> None:
        duration = Distribution(_as_dist(duration_ms))
        if isinstance(period_ms, dict):
            self.windows = OnOff(duration, period=Distribution(period_ms))
        elif gap_ms is None:
            period_s = (period_ms / 1e3) if period_ms is not None else 1.0 / rate_hz
            gap_s = period_s - duration.mean
            periodic = StallMode(mode) is StallMode.PERIODIC
            gap = {'dist': 'fixed', 'value': gap_s} if periodic else {'dist': 'exponential', 'mean': gap_s}
            self.windows = OnOff(duration, Distribution(gap, scale=1.0))
        else:
            self.windows = OnOff(duration, Distribution(_as_dist(gap_ms)))
        self.duration, self.gap, self.period = duration, self.windows.gap, self.windows.period
        self.stalled_fraction = self.windows.on_fraction
        self._release = self.windows.release

    def reset(self) -> None:
        self.windows.reset()

    def at(self, t: float, floor_s: float, rng: np.random.Generator) -> float | None:
        """A message at time ``t`` leaves at the end of the stall holding it (else at ``t``)."""
        windows = self.windows
        if windows._clear_from <= t < windows._next_start_s:  # OnOff.release's first case, inlined
            return t
        return self._release(t, floor_s, rng)

    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        windows = self.windows
        if windows._clear_from <= arrive_s < windows._next_start_s:  # OnOff.release's first case, inlined
            return arrive_s
        return self._release(arrive_s, send_s, rng)


class GilbertElliottInTime(SingleCopyStage):
    """Burst loss in time: a good/bad chain that holds each state an exponential time (mean_good_ms,
    mean_bad_ms) whatever the message rate; a message is lost with the loss probability of the state
    at its time on the link (its arrival at this stage). The chain starts at the first message in its
    stationary state (bad with probability mean_bad / (mean_good + mean_bad)) and then runs on.
    """

    MODEL = "gilbert_elliott"

    def __init__(self, mean_good_ms: float, mean_bad_ms: float, loss_good: float, loss_bad: float) -> None:
        self.loss_good, self.loss_bad = loss_good, loss_bad
        self.windows = OnOff(Distribution({'dist': 'exponential', 'mean': mean_bad_ms}),
                             Distribution({'dist': 'exponential', 'mean': mean_good_ms}))
        self.pi_bad = self.windows.on_fraction
        self._uniform = DrawBuffer(_uniforms)  # the loss draws; the chain's holds draw from the generator itself

    @property
    def loss_rate(self) -> float:
        """Stationary (long-run) loss probability."""
        return self.pi_bad * self.loss_bad + (1.0 - self.pi_bad) * self.loss_good

    def reset(self) -> None:
        self.windows.reset()

    def at(self, t: float, floor_s: float, rng: np.random.Generator) -> float | None:
        """``t``, or None if the message at time ``t`` is lost."""
        windows = self.windows
        if windows._clear_from <= t < windows._next_start_s:  # OnOff.release's first case, inlined: a good spell
            p = self.loss_good
        else:
            p = self.loss_bad if windows.release(t, floor_s, rng) > t else self.loss_good  # held: a bad spell
        if p <= 0.0 or (p < 1.0 and self._uniform.take(rng) >= p):
            return t
        return None

    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        return self.at(arrive_s, send_s, rng)


class DriftingDelay(SingleCopyStage):
    """A base latency that wanders: it holds a level drawn from ``level_ms`` for a time drawn from
    ``hold_ms``, then draws the next level; each message sent adds the level of its send time.

    Levels and holds are one renewal process in link time, entered at a random phase (the
    equilibrium residual of the first hold), so it does not restart at an episode boundary. Use it to
    train on delays from 0 to beyond a deployment's p95 rather than one regime's distribution.
    """

    MODEL = "drifting_delay"

    def __init__(self, level_ms: float | dict[str, Any], hold_ms: float | dict[str, Any]) -> None:
        self.levels = Distribution(_as_dist(level_ms))
        self.hold = Distribution(_as_dist(hold_ms))
        self.reset()

    def reset(self) -> None:
        self._level_s, self._until_s, self._started = 0.0, -math.inf, False

    @property
    def level(self) -> tuple[float, float]:
        """The level (seconds) held now, and the time until which it holds (-inf before the first message): a
        message sent before then adds this level. The vector env caches it and asks again only past that time."""
        return self._level_s, self._until_s

    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        if send_s < self._until_s:  # the level holds (-inf before the first message)
            return arrive_s + self._level_s
        if not self._started or send_s - self._until_s > MAX_RENEWALS * self.hold.mean:  # see MAX_RENEWALS
            self._started = True
            self._level_s, self._until_s = self.levels.sample(rng), send_s + self.hold.residual(rng)
        while send_s >= self._until_s:
            self._level_s = self.levels.sample(rng)
            self._until_s += self.hold.sample(rng)
        return arrive_s + self._level_s


def _as_dist(value: float | dict[str, Any]) -> dict[str, Any]:
    return value if isinstance(value, dict) else {'dist': 'fixed', 'value': value}


class Bandwidth(SingleCopyStage):
    """A rate-limited FIFO: serialisation delay size * 8 / rate plus a bounded queue with tail drop.

    queue_packets is how many packets may wait behind the one being serialised; a packet
    arriving to a full queue is dropped (counted as a queue drop, not an injected loss).
    Packets are served in the order they reach this stage.
    """

    MODEL = "bandwidth"
    queue_drops = True

    def __init__(self, rate_kbps: float, queue_packets: int) -> None:
        self.bits_per_s = rate_kbps * 1e3
        self.queue_packets = int(queue_packets)
        self.reset()

    def reset(self) -> None:
        self._departures: deque[float] = deque()  # finish times of packets still in the system
        self._last_in_s = -math.inf

    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        t = max(arrive_s, self._last_in_s)
        self._last_in_s = t
        while self._departures and self._departures[0] <= t:
            self._departures.popleft()
        if len(self._departures) > self.queue_packets:
            return None
        start = self._departures[-1] if self._departures else t
        done_s = start + size_bytes * 8 / self.bits_per_s
        self._departures.append(done_s)
        return done_s


class Duplicate:
    """With probability p, also delivers a copy extra_delay_ms after the original."""

    MODEL = "duplicate"

    def __init__(self, p: float, extra_delay_ms: float) -> None:
        self.p = p
        self.extra_delay_s = extra_delay_ms / 1e3
        self._uniform = DrawBuffer(_uniforms)

    def reset(self) -> None:
        """Stateless."""

    def apply(self, packet: Packet, rng: np.random.Generator) -> list[Packet]:
        if self._uniform.take(rng) >= self.p:
            return [packet]
        return [packet, Packet(packet.send_s, packet.arrive_s + self.extra_delay_s, packet.size_bytes)]


class TraceMode(str, Enum):
    LOOP = "loop"
    RANDOM_OFFSET = "random_offset"


class TraceReplay(SingleCopyStage):
    """Replays recorded per-message delays and losses in order, wrapping around at the end.

    'loop' starts at the first record, 'random_offset' at a record drawn from the generator, on the
    first packet the link carries; the position then runs on across episodes (until `reset`).
    Delays of lost records are ignored.
    """

    MODEL = "trace_replay"

    def __init__(self, delays_ms: Sequence[float] | np.ndarray, lost: Sequence[bool] | np.ndarray | None = None,
                 mode: str = "loop") -> None:
        delays = np.asarray(delays_ms, dtype=np.float64)
        self.lost = np.asarray(lost, dtype=bool) if lost is not None else np.zeros(delays.size, dtype=bool)
        self.delays_s = np.where(self.lost, 0.0, delays / 1e3)
        self.mode = TraceMode(mode)
        self._index: int | None = None

    def reset(self) -> None:
        self._index = None

    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        if self._index is None:
            self._index = int(rng.integers(len(self.delays_s))) if self.mode is TraceMode.RANDOM_OFFSET else 0
        i = self._index
        self._index = (i + 1) % len(self.delays_s)
        if self.lost[i]:
            return None
        return arrive_s + float(self.delays_s[i])


MODELS: dict[str, type] = {
    cls.MODEL: cls
    for cls in (
        FixedDelay,
        GaussianDelay,
        LogNormalDelay,
        GammaDelay,
        ParetoDelay,
        EmpiricalDelay,
        BernoulliLoss,
        GilbertElliottLoss,
        Stall,
        DriftingDelay,
        Bandwidth,
        Duplicate,
        TraceReplay,
    )
}


def build_stage(spec: dict) -> Stage:
    """Build a stage from `{"model": name, **params}`, validated by the profile schema (one-line ConfigError)."""
    params = check_stage(spec)
    if spec["model"] == GilbertElliottInTime.MODEL and "mean_bad_ms" in params:
        return GilbertElliottInTime(**params)
    return MODELS[spec["model"]](**params)
