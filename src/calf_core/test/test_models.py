"""Unit tests for the network model stages and Link."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calf_core.errors import ConfigError
from calf_core.link import Link, Packet
from calf_core.models import (
    Bandwidth,
    BernoulliLoss,
    DriftingDelay,
    Duplicate,
    EmpiricalDelay,
    FixedDelay,
    GaussianDelay,
    GilbertElliottLoss,
    LogNormalDelay,
    ParetoDelay,
    Stall,
    TraceReplay,
    build_stage,
)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def send_all(link: Link, times: list[float], size_bytes: int = 64) -> list[list[float]]:
    return [link.transmit(t, size_bytes) for t in times]


def delays_ms(stage, n: int, seed: int = 0) -> np.ndarray:
    g = rng(seed)
    return np.array([stage.apply(Packet(0.0, 0.0, 64), g)[0].arrive_s * 1e3 for _ in range(n)])


def test_empty_link_is_ideal():
    assert send_all(Link([], rng()), [0.0, 0.02, 0.04]) == [[0.0], [0.02], [0.04]]


def test_fixed_delay_exact():
    link = Link([FixedDelay(10.0)], rng())
    assert send_all(link, [0.0, 0.5]) == [pytest.approx([0.01]), pytest.approx([0.51])]
    assert link.stats.sent == 2 and link.stats.delivered == 2


def test_send_times_must_not_decrease():
    link = Link([], rng())
    link.transmit(1.0)
    with pytest.raises(ValueError, match="non-decreasing"):
        link.transmit(0.5)


def test_trace_replay_loop_and_reset():
    link = Link([TraceReplay([1.0, 2.0, 3.0], [False, True, False])], rng())
    expected = [[0.001], [], [2.003], [3.001], []]
    assert send_all(link, [0.0, 1.0, 2.0, 3.0, 4.0]) == [pytest.approx(e) for e in expected]
    assert link.stats.dropped_injected == 2
    link.reset()
    assert link.transmit(0.0) == pytest.approx([0.001])
    assert link.stats.sent == 1


def test_trace_replay_random_offset_uses_rng_after_reset():
    trace = [10.0, 20.0, 30.0, 40.0, 50.0]
    link = Link([TraceReplay(trace, mode="random_offset")], rng(7))
    reference = rng(7)
    for _ in range(3):
        start = int(reference.integers(len(trace)))
        got = [t[0] * 1e3 for t in send_all(link, [0.0] * 7)]
        assert got == pytest.approx([trace[(start + i) % len(trace)] for i in range(7)])
        link.reset()


def test_fifo_versus_reorder():
    assert send_all(Link([TraceReplay([50.0, 10.0])], rng(), reorder=True), [0.0, 0.02]) == [[0.05], [0.03]]
    assert send_all(Link([TraceReplay([50.0, 10.0])], rng(), reorder=False), [0.0, 0.02]) == [[0.05], [0.05]]


def test_bandwidth_serialisation_and_tail_drop():
    link = Link([Bandwidth(rate_kbps=80.0, queue_packets=1)], rng())  # 1000 B -> 0.1 s
    got = send_all(link, [0.0, 0.0, 0.0, 0.15], size_bytes=1000)
    assert got == [pytest.approx(e) for e in ([0.1], [0.2], [], [0.3])]
    assert (link.stats.dropped_queue, link.stats.dropped_injected) == (1, 0)
    link.reset()
    assert link.transmit(0.0, 1000) == pytest.approx([0.1])


def stall_windows(link: Link, end_s: float, step_s: float = 0.001) -> list[tuple[float, float]]:
    """(start, end) of the stalls a link holds packets in, probed every step_s from 0 to end_s."""
    windows: list[tuple[float, float]] = []
    for t in np.arange(0.0, end_s, step_s):
        release = link.transmit(float(t))[0]
        if release > t + 1e-12:
            if not windows or windows[-1][1] != pytest.approx(release):
                windows.append((float(t), release))
    return windows


def test_periodic_stall_holds_until_window_end_at_a_random_phase():
    windows = stall_windows(Link([Stall(duration_ms=30.0, period_ms=100.0)], rng()), 1.0)
    ends = np.array([end for _, end in windows])
    assert np.diff(ends) == pytest.approx(np.full(len(ends) - 1, 0.1))  # one stall every period
    assert [end - start for start, end in windows[1:]] == pytest.approx([0.03] * (len(windows) - 1), abs=0.0011)
    phases = {round(stall_windows(Link([Stall(duration_ms=30.0, period_ms=100.0)], rng(seed)), 0.2)[0][1] % 0.1, 3)
              for seed in range(8)}
    assert len(phases) > 4  # the phase comes from the generator, not from the first packet


@pytest.mark.parametrize("duration, gap, mean_cycle_s, stalled", [
    ({"dist": "uniform", "low": 150, "high": 300}, {"dist": "uniform", "low": 4000, "high": 6000}, 5.225, 0.225 / 5.225),
    ({"dist": "lognormal", "median": 200, "sigma": 0.3}, {"dist": "exponential", "mean": 2000}, 2.209, 0.209 / 2.209),
    (200.0, {"dist": "fixed", "value": 1800}, 2.0, 0.1),
])
@pytest.mark.slow
def test_stall_distributions_set_the_cycle_and_the_stalled_fraction(duration, gap, mean_cycle_s, stalled):
    link = Link([build_stage({"model": "stall", "duration_ms": duration, "gap_ms": gap})], rng(4))
    windows = stall_windows(link, 1500.0, 0.005)
    starts = np.array([start for start, _ in windows])
    assert np.mean(np.diff(starts)) == pytest.approx(mean_cycle_s, rel=0.1)
    assert sum(end - start for start, end in windows) / 1500.0 == pytest.approx(stalled, rel=0.15)


@pytest.mark.parametrize("duration", [200.0, {"dist": "uniform", "low": 100, "high": 300},
                                      {"dist": "lognormal", "median": 180, "sigma": 0.5}])
@pytest.mark.slow
def test_a_stall_process_starts_in_its_stationary_state(duration):
    """The first packet finds the link stalled with probability mean duration / mean cycle, and a
    held packet waits on average E[D^2] / (2 E[D]) (the equilibrium residual), not a fresh duration."""
    spec = {"model": "stall", "duration_ms": duration, "gap_ms": {"dist": "uniform", "low": 600, "high": 1000}}
    holds = np.array([Link([build_stage(spec)], rng(seed)).transmit(0.0)[0] for seed in range(6000)])
    stage = build_stage(spec)
    mean_d = stage.duration.mean
    assert np.mean(holds > 0) == pytest.approx(mean_d / (mean_d + 0.8), abs=0.02)
    draws = np.array([stage.duration.sample(rng(seed)) for seed in range(6000)])
    assert np.mean(holds[holds > 0]) == pytest.approx(np.mean(draws**2) / (2 * np.mean(draws)), rel=0.08)


def test_uniform_stall_durations_stay_in_their_range():
    stage = build_stage({"model": "stall", "duration_ms": {"dist": "uniform", "low": 150, "high": 300}, "gap_ms": 1000})
    durations = [end - start for start, end in stall_windows(Link([stage], rng(1)), 60.0, 0.001)[1:]]
    assert min(durations) >= 0.149 and max(durations) <= 0.301
    assert np.std(durations) > 0.02  # not one fixed duration


def test_a_drifting_delay_holds_each_level_then_redraws_it():
    """Levels U(0, 80) ms, each held ~2 s: consecutive messages share a level, and over a long run the
    levels cover the range uniformly, changing about once per mean hold."""
    stage = build_stage({"model": "drifting_delay", "level_ms": {"dist": "uniform", "low": 0, "high": 80},
                         "hold_ms": {"dist": "exponential", "mean": 2000}})
    link = Link([stage], rng(4))
    times = np.arange(0.0, 2000.0, 0.02)  # 2000 s, one message per 20 ms tick
    delay_ms = np.array([link.transmit(t)[0] - t for t in times]) * 1e3
    changes = np.flatnonzero(np.diff(delay_ms) != 0)
    assert 800 <= len(changes) <= 1200  # ~1000 holds of 2 s
    levels = delay_ms[np.r_[0, changes + 1]]
    assert levels.min() >= 0 and levels.max() <= 80
    assert stats.kstest(levels / 80.0, "uniform").pvalue > 0.01
    holds_s = np.diff(times[changes + 1])
    assert np.mean(holds_s) == pytest.approx(2.0, rel=0.1)


def test_a_drifting_delay_runs_on_across_reseed():
    """A reseed (an episode's reset) keeps the level; only ``reset`` starts a fresh process."""
    stage = DriftingDelay({"dist": "uniform", "low": 0, "high": 80}, {"dist": "fixed", "value": 10_000})
    link = Link([stage], rng(0))
    before = link.transmit(1.0)[0] - 1.0
    link.reseed(rng(99))
    assert link.transmit(1.5)[0] - 1.5 == pytest.approx(before)


def test_gamma_delay_matches_its_moments_either_way():
    by_moments = delays_ms(build_stage({"model": "gamma_delay", "mean_ms": 20, "std_ms": 10}), 40000)
    by_shape = delays_ms(build_stage({"model": "gamma_delay", "shape": 4, "scale_ms": 5}), 40000, seed=1)
    for sample in (by_moments, by_shape):
        assert (sample.mean(), sample.std()) == pytest.approx((20.0, 10.0), rel=0.03)
        assert stats.kstest(sample, stats.gamma(4, scale=5).cdf).pvalue > 0.001


def test_link_state_runs_on_across_reseed_but_not_reset():
    trace = TraceReplay([1.0, 2.0, 3.0])
    link = Link([trace], rng())
    assert send_all(link, [0.0, 1.0]) == [pytest.approx([0.001]), pytest.approx([1.002])]
    link.reseed(rng(5))
    assert link.transmit(2.0) == pytest.approx([2.003])  # the trace position runs on
    link.reset()
    assert link.transmit(0.0) == pytest.approx([0.001])  # a fresh process


def test_random_stall_fraction_and_hold():
    link = Link([Stall(duration_ms=50.0, rate_hz=2.0, mode="random")], rng(3))
    sends = np.arange(0.0, 200.0, 0.001)
    holds = np.array([link.transmit(t)[0] - t for t in sends])
    assert np.all((holds >= 0.0) & (holds <= 0.05 + 1e-12))
    assert np.mean(holds > 0) == pytest.approx(0.1, abs=0.01)  # duration / period


def test_duplicate():
    link = Link([Duplicate(p=1.0, extra_delay_ms=5.0)], rng())
    assert link.transmit(1.0) == pytest.approx([1.0, 1.005])
    assert (link.stats.delivered, link.stats.duplicated) == (2, 1)
    assert Link([Duplicate(p=0.0, extra_delay_ms=5.0)], rng()).transmit(1.0) == [1.0]


def test_duplicates_pass_later_stages_and_fifo():
    link = Link([Duplicate(1.0, 30.0), BernoulliLoss(0.0), FixedDelay(1.0)], rng(), reorder=False)
    assert send_all(link, [0.0, 0.01]) == [pytest.approx([0.001, 0.031]), pytest.approx([0.031, 0.041])]


def chain() -> list:
    return [
        GaussianDelay(25.0, 28.0),
        GilbertElliottLoss(0.1, 0.3, 0.01, 0.5),
        Stall(duration_ms=40.0, period_ms=300.0, mode="random"),
        Bandwidth(500.0, 4),
        Duplicate(0.05, 3.0),
    ]


def test_same_seed_same_sequence_and_reset_reproduces():
    times = [0.02 * k for k in range(500)]
    first = send_all(Link(chain(), rng(42)), times)
    link = Link(chain(), rng(42))
    assert send_all(link, times) == first
    link.reset(rng(42))
    assert send_all(link, times) == first
    assert send_all(Link(chain(), rng(43)), times) != first


def test_leading_independent_stages_are_drawn_together_like_stage_by_stage():
    def chain() -> list:
        return [FixedDelay(5.0), GaussianDelay(25.0, 28.0), BernoulliLoss(0.1)]

    n = 20000
    link = Link(chain(), rng(3))
    together = [link.transmit(0.0) for _ in range(n)]
    stages, g, apart = chain(), rng(4), []
    for _ in range(n):
        packets = [Packet(0.0, 0.0, 64)]
        for stage in stages:
            packets = [copy for packet in packets for copy in stage.apply(packet, g)]
        apart.append([packet.arrive_s for packet in packets])
    lost = sum(not arrivals for arrivals in together)
    assert link.stats.dropped_injected == lost and link.stats.delivered == n - lost
    assert lost / n == pytest.approx(sum(not arrivals for arrivals in apart) / n, abs=0.01)
    delays = [np.concatenate([a for a in runs if a]) for runs in (together, apart)]
    assert delays[0].min() >= 0.005 and stats.ks_2samp(*delays).pvalue > 0.01
    link.reset(rng(3))
    assert [link.transmit(0.0) for _ in range(n)] == together


def test_gaussian_truncated_by_resampling():
    sample = delays_ms(GaussianDelay(25.0, 28.0), 20000)
    assert sample.min() >= 0.0
    dist = stats.truncnorm(a=-25.0 / 28.0, b=np.inf, loc=25.0, scale=28.0)
    assert stats.kstest(sample, dist.cdf).pvalue > 0.01


@pytest.mark.parametrize(
    ("stage", "dist"),
    [
        (LogNormalDelay(median_ms=12.0, sigma=0.6), stats.lognorm(s=0.6, scale=12.0)),
        (ParetoDelay(scale_ms=8.0, shape=2.5), stats.pareto(b=2.5, scale=8.0)),
    ],
)
def test_heavy_tailed_delays_match_distribution(stage, dist):
    assert stats.kstest(delays_ms(stage, 20000), dist.cdf).pvalue > 0.01


def test_empirical_delay_matches_histogram():
    edges, probs = [0.0, 5.0, 10.0, 30.0], [0.2, 0.5, 0.3]
    cdf = np.interp  # piecewise-linear CDF through the bin edges
    sample = delays_ms(EmpiricalDelay(edges, probs), 20000)
    assert stats.kstest(sample, lambda x: cdf(x, edges, np.concatenate([[0.0], np.cumsum(probs)]))).pvalue > 0.01


def loss_rate(stage, n: int, seed: int = 0) -> float:
    link = Link([stage], rng(seed))
    return sum(not link.transmit(0.0) for _ in range(n)) / n


def test_bernoulli_loss_rate():
    assert loss_rate(BernoulliLoss(0.1), 100000) == pytest.approx(0.1, abs=0.004)


def test_gilbert_elliott_stationary_loss_rate():
    p_gb, p_bg, loss_good, loss_bad = 0.05, 0.25, 0.01, 0.6
    pi_bad = p_gb / (p_gb + p_bg)
    expected = pi_bad * loss_bad + (1 - pi_bad) * loss_good
    stage = GilbertElliottLoss(p_gb, p_bg, loss_good, loss_bad)
    assert stage.loss_rate == pytest.approx(expected)
    assert loss_rate(stage, 200000) == pytest.approx(expected, abs=0.006)


def test_gilbert_elliott_losses_are_bursty():
    link = Link([GilbertElliottLoss(0.02, 0.2, 0.0, 1.0)], rng())
    lost = np.array([not link.transmit(0.0) for _ in range(50000)])
    starts = np.sum(lost[1:] & ~lost[:-1])
    assert lost.sum() / starts == pytest.approx(5.0, rel=0.1)  # mean burst = 1 / p_bad_to_good


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"model": "fixed_delay", "latency_ms": -5}, "fixed_delay: latency_ms must be in [0, 60000] ms, got -5"),
        ({"model": "fixed_delay", "latency_ms": 1e12}, "fixed_delay: latency_ms must be in [0, 60000] ms, got 1e+12"),
        ({"model": "bernoulli_loss", "p": 1.5}, "bernoulli_loss: p must be in [0, 1], got 1.5"),
        ({"model": "gilbert_elliott", "p_good_to_bad": 0.1, "p_bad_to_good": 0.5, "loss_good": 0, "loss_bad": 2},
         "loss_bad must be in [0, 1], got 2"),
        ({"model": "gilbert_elliott", "p_good_to_bad": 0.1, "p_bad_to_good": 0, "loss_good": 0, "loss_bad": 1},
         "p_bad_to_good must be in [1e-09, 1], got 0"),
        ({"model": "warp_drive"}, "unknown model 'warp_drive'"),
        ({"model": "bandwidth", "rate_kbps": 0, "queue_packets": 10}, "bandwidth: rate_kbps must be in [1, 1e+08] kbit/s, got 0"),
        ({"model": "bandwidth", "rate_kbps": 1e-300, "queue_packets": 10}, "rate_kbps must be in [1, 1e+08] kbit/s, got 1e-300"),
        ({"model": "bandwidth", "rate_kbps": 100, "queue_packets": -1}, "queue_packets must be in [0, 100000] messages, got -1"),
        ({"model": "bandwidth", "rate_kbps": 100, "queue_packets": 2.5}, "queue_packets must be an integer (messages), got 2.5"),
        ({"model": "gaussian_delay", "mean_ms": 25}, "gaussian_delay: missing required key 'std_ms'"),
        ({"model": "gaussian_delay", "mean_ms": 25, "std_ms": 1, "skew": 2}, "gaussian_delay: unknown key 'skew'"),
        ({"model": "lognormal_delay", "median_ms": "ten", "sigma": 1}, "median_ms must be a finite number (ms), got 'ten'"),
        ({"model": "lognormal_delay", "median_ms": 10, "sigma": 40}, "sigma must be in [0, 5], got 40"),
        ({"model": "gamma_delay", "mean_ms": 10, "shape": 2}, "gamma_delay: give mean_ms and std_ms, or shape and scale_ms"),
        ({"model": "stall", "duration_ms": 50, "period_ms": 40}, "the mean duration_ms must be < the period (40 ms), got 50"),
        ({"model": "stall", "duration_ms": 5, "period_ms": 40, "rate_hz": 2}, "exactly one of gap_ms, period_ms or rate_hz"),
        ({"model": "stall", "duration_ms": 5, "period_ms": 40, "mode": "sometimes"}, "got 'sometimes'"),
        ({"model": "stall", "duration_ms": {"dist": "uniform", "low": 300, "high": 150}, "gap_ms": 4000},
         "stall: duration_ms: low must be < high, got 300 and 150"),
        ({"model": "stall", "duration_ms": {"dist": "gamma", "mean": 3}, "gap_ms": 4000},
         "stall: duration_ms: dist must be one of fixed, uniform, exponential, lognormal, got 'gamma'"),
        ({"model": "stall", "duration_ms": {"dist": "exponential", "mean": 3, "std": 1}, "gap_ms": 4000},
         "stall: duration_ms (exponential): unknown key 'std'"),
        ({"model": "empirical_delay", "bins_ms": [0, 5, 4], "probs": [0.5, 0.5]}, "strictly increasing, got [0, 5, 4]"),
        ({"model": "trace_replay", "delays_ms": [1.0, -2.0]}, "delays_ms[1] must be in [0, 60000] ms, got -2"),
        ({"model": "trace_replay", "delays_ms": [1.0], "lost": [True, False]}, "lost must be as long as delays_ms"),
        ({"model": "drifting_delay", "level_ms": {"dist": "uniform", "low": -5, "high": 80}, "hold_ms": 2000},
         "drifting_delay: level_ms (uniform): low must be in [0, 60000] ms, got -5"),
        ({"model": "drifting_delay", "level_ms": 10, "hold_ms": 0}, "drifting_delay: hold_ms must be in [1, 3.6e+06] ms"),
        ({"model": "drifting_delay", "level_ms": 10}, "drifting_delay: missing required key 'hold_ms'"),
    ],
)
def test_invalid_parameters_raise_one_line_config_error(spec, message):
    with pytest.raises(ConfigError) as info:
        build_stage(spec)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
