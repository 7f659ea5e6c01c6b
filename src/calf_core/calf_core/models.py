"""Network model stages: delay, loss, stalls, bandwidth, duplication and trace replay.

Each stage is a small class following `calf_core.link.Stage`. Constructors validate their
parameters and raise `ConfigError` naming the parameter and the received value. Delays are
additive: chain `FixedDelay` with a jitter stage to get a base latency plus jitter.
Parameters are in milliseconds (`*_ms`); packet times are in seconds. Random numbers are drawn
in blocks (`DrawBuffer`): the same seed gives the same sequence, at a fraction of the cost of one
generator call per number.

`build_stage({"model": "gaussian_delay", "mean_ms": 25, "std_ms": 28})` builds a stage from
a profile spec; `MODELS` maps each model name to its class.
"""
from __future__ import annotations

import inspect
import math
import numbers
from collections import deque
from collections.abc import Sequence
from enum import Enum
from typing import Any

import numpy as np

from calf_core.errors import ConfigError
from calf_core.link import DrawBuffer, IndependentStage, Packet, SingleCopyStage, Stage


def _number(model: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ConfigError(f"{model}: {name} must be a finite number, got {value!r}")
    return float(value)


def _non_negative(model: str, name: str, value: Any) -> float:
    number = _number(model, name, value)
    if number < 0.0:
        raise ConfigError(f"{model}: {name} must be >= 0, got {value}")
    return number


def _positive(model: str, name: str, value: Any) -> float:
    number = _number(model, name, value)
    if number <= 0.0:
        raise ConfigError(f"{model}: {name} must be > 0, got {value}")
    return number


def _probability(model: str, name: str, value: Any) -> float:
    number = _number(model, name, value)
    if not 0.0 <= number <= 1.0:
        raise ConfigError(f"{model}: {name} must be in [0, 1], got {value}")
    return number


class FixedDelay(IndependentStage):
    """Adds a constant latency."""

    MODEL = "fixed_delay"

    def __init__(self, latency_ms: float) -> None:
        self.latency_s = _non_negative(self.MODEL, "latency_ms", latency_ms) / 1e3
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.latency_s)


class GaussianDelay(IndependentStage):
    """Adds N(mean_ms, std_ms) delay, truncated to >= 0 by resampling (not clipping)."""

    MODEL = "gaussian_delay"

    def __init__(self, mean_ms: float, std_ms: float) -> None:
        self.mean_ms = _non_negative(self.MODEL, "mean_ms", mean_ms)
        self.std_ms = _non_negative(self.MODEL, "std_ms", std_ms)
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
        self.median_ms = _positive(self.MODEL, "median_ms", median_ms)
        self.sigma = _non_negative(self.MODEL, "sigma", sigma)
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.median_ms * np.exp(self.sigma * rng.standard_normal(n)) / 1e3


class ParetoDelay(IndependentStage):
    """Adds a Pareto (type I) delay with minimum scale_ms and tail index shape.

    P(delay > x) = (scale_ms / x) ** shape for x >= scale_ms, so the median is
    scale_ms * 2 ** (1 / shape) and the p95 is scale_ms * 20 ** (1 / shape).
    The mean is finite only for shape > 1 and the variance only for shape > 2.
    """

    MODEL = "pareto_delay"

    def __init__(self, scale_ms: float, shape: float) -> None:
        self.scale_ms = _positive(self.MODEL, "scale_ms", scale_ms)
        self.shape = _positive(self.MODEL, "shape", shape)
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.scale_ms * (1.0 + rng.pareto(self.shape, n)) / 1e3


class EmpiricalDelay(IndependentStage):
    """Adds a delay from a histogram: pick bin i with weight probs[i], then uniform in [bins_ms[i], bins_ms[i+1]).

    `bins_ms` are the len(probs) + 1 increasing bin edges; `probs` are normalised to sum 1.
    """

    MODEL = "empirical_delay"

    def __init__(self, bins_ms: Sequence[float], probs: Sequence[float]) -> None:
        edges = [_non_negative(self.MODEL, "bins_ms", edge) for edge in bins_ms]
        weights = [_non_negative(self.MODEL, "probs", p) for p in probs]
        if len(edges) != len(weights) + 1 or not weights:
            raise ConfigError(
                f"{self.MODEL}: bins_ms needs len(probs) + 1 edges, got {len(edges)} edges for {len(weights)} probs"
            )
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise ConfigError(f"{self.MODEL}: bins_ms must be strictly increasing, got {list(bins_ms)}")
        total = sum(weights)
        if total <= 0.0:
            raise ConfigError(f"{self.MODEL}: probs must have a positive sum, got {list(probs)}")
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
        self.p = _probability(self.MODEL, "p", p)
        super().__init__()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.where(rng.random(n) < self.p, np.nan, 0.0)


def _uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random(n)


class GilbertElliottLoss(SingleCopyStage):
    """Burst loss: a two-state Markov chain stepped once per packet.

    Each packet is lost with the current state's loss probability, then the state moves
    (good -> bad with p_good_to_bad, bad -> good with p_bad_to_good). After reset the first
    packet draws its state from the stationary distribution, so the long-run loss rate is
    pi_bad * loss_bad + (1 - pi_bad) * loss_good with pi_bad = p_gb / (p_gb + p_bg).
    The mean burst (bad-state) length is 1 / p_bad_to_good packets.
    """

    MODEL = "gilbert_elliott"

    def __init__(self, p_good_to_bad: float, p_bad_to_good: float, loss_good: float, loss_bad: float) -> None:
        self.p_good_to_bad = _probability(self.MODEL, "p_good_to_bad", p_good_to_bad)
        self.p_bad_to_good = _probability(self.MODEL, "p_bad_to_good", p_bad_to_good)
        if self.p_bad_to_good == 0.0:
            raise ConfigError(f"{self.MODEL}: p_bad_to_good must be > 0, got {p_bad_to_good}")
        self.loss_good = _probability(self.MODEL, "loss_good", loss_good)
        self.loss_bad = _probability(self.MODEL, "loss_bad", loss_bad)
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
        uniform = self._uniform
        if self._bad is None:
            self._bad = uniform.take(rng) < self.pi_bad
        lost = uniform.take(rng) < (self.loss_bad if self._bad else self.loss_good)
        flip = uniform.take(rng) < (self.p_bad_to_good if self._bad else self.p_good_to_bad)
        self._bad = self._bad != flip
        return None if lost else arrive_s


class StallMode(str, Enum):
    PERIODIC = "periodic"
    RANDOM = "random"


class Stall(SingleCopyStage):
    """Link outages: a packet whose arrival falls inside a stall window is released at its end.

    Windows last duration_ms and recur every period_ms (or 1000 / rate_hz) on average, timed
    from the first packet after reset. 'periodic': window k covers the last duration_ms of
    period k (k >= 1). 'random': the gaps between windows are exponential with mean
    period_ms - duration_ms, so stalls start as a renewal process with the same mean period.
    Either way the fraction of time stalled is duration_ms / period_ms.
    """

    MODEL = "stall"

    def __init__(
        self,
        duration_ms: float,
        period_ms: float | None = None,
        rate_hz: float | None = None,
        mode: str = "periodic",
    ) -> None:
        if (period_ms is None) == (rate_hz is None):
            raise ConfigError(
                f"{self.MODEL}: give exactly one of period_ms or rate_hz, got period_ms={period_ms}, rate_hz={rate_hz}"
            )
        if period_ms is None:
            period_ms = 1e3 / _positive(self.MODEL, "rate_hz", rate_hz)
        self.period_s = _positive(self.MODEL, "period_ms", period_ms) / 1e3
        self.duration_s = _positive(self.MODEL, "duration_ms", duration_ms) / 1e3
        if self.duration_s >= self.period_s:
            raise ConfigError(
                f"{self.MODEL}: duration_ms must be < the period ({self.period_s * 1e3:g} ms), got {duration_ms}"
            )
        try:
            self.mode = StallMode(mode)
        except ValueError:
            raise ConfigError(f"{self.MODEL}: mode must be 'periodic' or 'random', got {mode!r}") from None
        self._periodic = self.mode is StallMode.PERIODIC
        self.reset()

    def reset(self) -> None:
        self._origin_s: float | None = None
        self._windows: deque[tuple[float, float]] = deque()
        self._next_start_s = math.inf

    def arrival(self, send_s: float, arrive_s: float, size_bytes: int, rng: np.random.Generator) -> float | None:
        if self._origin_s is None:
            self._origin_s = send_s
            if not self._periodic:
                self._next_start_s = send_s + self._gap(rng)
        t = arrive_s
        if self._periodic:
            into = (t - self._origin_s) % self.period_s
            if into >= self.period_s - self.duration_s:
                return t - into + self.period_s
            return t
        while self._next_start_s <= t:
            end = self._next_start_s + self.duration_s
            self._windows.append((self._next_start_s, end))
            self._next_start_s = end + self._gap(rng)
        while self._windows and self._windows[0][1] <= send_s:
            self._windows.popleft()  # later packets arrive after this send, so never in these windows
        for start, end in self._windows:
            if start <= t < end:
                return end
        return t

    def _gap(self, rng: np.random.Generator) -> float:
        return rng.exponential(self.period_s - self.duration_s)


class Bandwidth(SingleCopyStage):
    """A rate-limited FIFO: serialisation delay size * 8 / rate plus a bounded queue with tail drop.

    queue_packets is how many packets may wait behind the one being serialised; a packet
    arriving to a full queue is dropped (counted as a queue drop, not an injected loss).
    Packets are served in the order they reach this stage.
    """

    MODEL = "bandwidth"
    queue_drops = True

    def __init__(self, rate_kbps: float, queue_packets: int) -> None:
        self.bits_per_s = _positive(self.MODEL, "rate_kbps", rate_kbps) * 1e3
        if isinstance(queue_packets, bool) or not isinstance(queue_packets, numbers.Integral) or queue_packets < 0:
            raise ConfigError(f"{self.MODEL}: queue_packets must be an integer >= 0, got {queue_packets!r}")
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
        self.p = _probability(self.MODEL, "p", p)
        self.extra_delay_s = _non_negative(self.MODEL, "extra_delay_ms", extra_delay_ms) / 1e3
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

    'loop' starts at the first record after every reset; 'random_offset' starts at a record
    drawn from the generator on the first packet after reset. Delays of lost records are ignored.
    """

    MODEL = "trace_replay"

    def __init__(self, delays_ms: Sequence[float], lost: Sequence[bool] | None = None, mode: str = "loop") -> None:
        lost = [False] * len(delays_ms) if lost is None else list(lost)
        if len(delays_ms) == 0 or len(lost) != len(delays_ms):
            raise ConfigError(
                f"{self.MODEL}: delays_ms and lost must be non-empty and equal length, got {len(delays_ms)} and {len(lost)}"
            )
        self.lost = tuple(bool(x) for x in lost)
        self.delays_s = tuple(
            0.0 if gone else _non_negative(self.MODEL, f"delays_ms[{i}]", d) / 1e3
            for i, (d, gone) in enumerate(zip(delays_ms, self.lost))
        )
        try:
            self.mode = TraceMode(mode)
        except ValueError:
            raise ConfigError(f"{self.MODEL}: mode must be 'loop' or 'random_offset', got {mode!r}") from None
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
        return arrive_s + self.delays_s[i]


MODELS: dict[str, type] = {
    cls.MODEL: cls
    for cls in (
        FixedDelay,
        GaussianDelay,
        LogNormalDelay,
        ParetoDelay,
        EmpiricalDelay,
        BernoulliLoss,
        GilbertElliottLoss,
        Stall,
        Bandwidth,
        Duplicate,
        TraceReplay,
    )
}


def build_stage(spec: dict) -> Stage:
    """Build a stage from `{"model": name, **params}`; raise ConfigError naming any bad model or parameter."""
    if not isinstance(spec, dict) or "model" not in spec:
        raise ConfigError(f"stage spec must be a mapping with a 'model' key, got {spec!r}")
    params = {k: v for k, v in spec.items() if k != "model"}
    cls = MODELS.get(spec["model"])
    if cls is None:
        raise ConfigError(f"unknown model {spec['model']!r} (available: {', '.join(sorted(MODELS))})")
    signature = inspect.signature(cls.__init__)
    expected = [name for name in signature.parameters if name != "self"]
    for name in params:
        if name not in expected:
            raise ConfigError(f"{cls.MODEL}: unknown parameter {name!r} (expected {', '.join(expected)})")
    for name in expected:
        if signature.parameters[name].default is inspect.Parameter.empty and name not in params:
            raise ConfigError(f"{cls.MODEL}: missing parameter {name!r}")
    return cls(**params)
