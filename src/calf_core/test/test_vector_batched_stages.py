"""The vector env's batched stages in time (stall, Gilbert-Elliott in time, drifting delay, the shared process) follow
the scalar stages in distribution, over many envs, and call their scalar process only about once per cycle."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from calf_core.link import SharedProcess
from calf_core.models import DriftingDelay, OnOff, build_stage
from calf_core.vector_networked import DriftBatch, SharedBatch, TimedBatch

ENVS, TICKS, DT_S = 300, 600, 0.02
STALLS = [
    {'model': 'stall', 'mode': 'random', 'period_ms': 600.0, 'duration_ms': 120.0},  # wifi_degraded's, 7x as often
    {'model': 'stall', 'duration_ms': {'dist': 'uniform', 'low': 30, 'high': 200}, 'gap_ms': 250},
    {'model': 'stall', 'duration_ms': 60, 'period_ms': {'dist': 'uniform', 'low': 40, 'high': 200}},  # overlaps merge
]
GE_TIME = {'model': 'gilbert_elliott', 'mean_good_ms': 300, 'mean_bad_ms': 60, 'loss_good': 0.02, 'loss_bad': 0.7}


def times(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per env and tick: a send time every DT_S, and the time the message meets the stage (a random delay later,
    so later messages may meet it earlier)."""
    send = np.arange(TICKS)[None, :] * DT_S + np.zeros((ENVS, 1))
    return send, send + np.random.default_rng(seed).exponential(0.03, (ENVS, TICKS))


def scalar_run(spec: dict, send: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Each env's own scalar stage: the time each message leaves it (NaN: lost)."""
    rng, out = np.random.default_rng(1), np.full(send.shape, np.nan)
    for env in range(ENVS):
        stage = build_stage(spec)
        for k in range(TICKS):
            t = stage.arrival(float(send[env, k]), float(at[env, k]), 64, rng)
            out[env, k] = np.nan if t is None else t
    return out


def batch_run(spec: dict, send: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, TimedBatch]:
    """The same messages through one TimedBatch, one call per tick over every env."""
    batch = TimedBatch([build_stage(spec) for _ in range(ENVS)])
    rng, envs, out = np.random.default_rng(2), np.arange(ENVS), np.full(send.shape, np.nan)
    for k in range(TICKS):
        t, lost = batch.meet(envs, send[:, k], at[:, k], rng)
        out[:, k] = np.where(lost, np.nan, t)
    return out, batch


def runs(flags: np.ndarray) -> np.ndarray:
    """Lengths of the runs of True along each row."""
    edges = np.diff(np.pad(flags.astype(np.int8), ((0, 0), (1, 1))), axis=1)
    return np.flatnonzero(edges.ravel() == -1) - np.flatnonzero(edges.ravel() == 1)


@pytest.mark.parametrize('spec', STALLS, ids=['random', 'gap_dist', 'period_dist'])
@pytest.mark.slow
def test_the_batched_stall_holds_as_the_scalar_stall(spec: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    send, at = times(0)
    scalar = scalar_run(spec, send, at)
    draws = []
    drawn = OnOff.drawn
    monkeypatch.setattr(OnOff, 'drawn', lambda self, *a: draws.append(1) or drawn(self, *a))
    batched, batch = batch_run(spec, send, at)
    held_s, held_b = scalar - at, batched - at
    assert not np.isnan(batched).any() and (held_b >= 0).all()
    stalled_s, stalled_b = (held_s > 0).mean(), (held_b > 0).mean()
    assert stalled_b == pytest.approx(stalled_s, rel=0.1), (stalled_s, stalled_b)
    assert stalled_b == pytest.approx(build_stage(spec).stalled_fraction, rel=0.15)
    assert stats.ks_2samp(held_s[held_s > 0], held_b[held_b > 0]).pvalue > 1e-3  # how long a message is held
    stall_s, stall_b = runs(held_s > 0), runs(held_b > 0)  # stalls as consecutive held messages
    assert stall_b.mean() == pytest.approx(stall_s.mean(), rel=0.1)
    assert stats.ks_2samp(stall_s, stall_b).pvalue > 1e-3
    cycles = ENVS * TICKS * DT_S / build_stage(spec).windows.cycle_s
    assert len(draws) < ENVS + cycles  # the scalar process is asked about once a cycle, not once a message


@pytest.mark.slow
def test_batched_gilbert_elliott_in_time_loses_as_the_scalar_stage() -> None:
    send, at = times(3)
    lost_s, lost_b = np.isnan(scalar_run(GE_TIME, send, at)), np.isnan(batch_run(GE_TIME, send, at)[0])
    stage = build_stage(GE_TIME)
    assert lost_b.mean() == pytest.approx(lost_s.mean(), rel=0.1)
    assert lost_b.mean() == pytest.approx(stage.loss_rate, rel=0.1)
    burst_s, burst_b = runs(lost_s), runs(lost_b)
    assert burst_b.mean() == pytest.approx(burst_s.mean(), rel=0.1)
    assert stats.ks_2samp(burst_s, burst_b).pvalue > 1e-3


@pytest.mark.slow
def test_the_batched_shared_process_holds_both_directions_as_one() -> None:
    """Each env's uplink and downlink meet one process: a stall holds both over the same interval; envs differ."""
    specs = [STALLS[1], GE_TIME]
    shared = SharedBatch([SharedProcess([build_stage(spec) for spec in specs]) for _ in range(ENVS)])
    rng, envs, at = np.random.default_rng(4), np.arange(ENVS), np.arange(TICKS) * DT_S + 0.01
    up_b, down_b = np.full((TICKS, ENVS), np.nan), np.full((TICKS, ENVS), np.nan)
    for k in range(TICKS):
        send = np.full(ENVS, k * DT_S)
        up, up_lost = shared.meet(0, envs, send, send + 0.01, rng)
        down, down_lost = shared.meet(1, envs, send, send + 0.01, rng)
        up_b[k], down_b[k] = np.where(up_lost, np.nan, up), np.where(down_lost, np.nan, down)
    out_s = np.full((TICKS, 2, 40), np.nan)  # 40 scalar processes
    for i in range(40):
        scalar = SharedProcess([build_stage(spec) for spec in specs])
        for k in range(TICKS):
            for direction in (0, 1):
                out = scalar.meet(direction, k * DT_S, at[k], rng)
                out_s[k, direction, i] = np.nan if out is None else out
    both = ~np.isnan(up_b) & ~np.isnan(down_b)
    assert np.array_equal(up_b[both], down_b[both])  # the same stall windows in both directions
    held_b = up_b > at[:, None]
    assert len({tuple(col) for col in held_b.T.tolist()}) > ENVS // 2  # each env its own process
    held_s = out_s[:, 0] > at[:, None]
    assert held_b[~np.isnan(up_b)].mean() == pytest.approx(held_s[~np.isnan(out_s[:, 0])].mean(), rel=0.2)
    assert np.isnan(up_b).mean() == pytest.approx(np.isnan(out_s[:, 0]).mean(), rel=0.2)


def test_a_message_a_stall_releases_is_not_in_a_stall() -> None:
    """Stalls that overlap merge: a message held by one leaves at the end of the merged stall, not inside the next."""
    stage, rng = build_stage(STALLS[2]), np.random.default_rng(5)
    released = [stage.arrival(t, t + 0.01, 64, rng) for t in np.arange(0.0, 8.0, DT_S).tolist()]
    starts, ends = np.array(stage.windows._starts), np.array(stage.windows._ends)
    assert len(starts) > 20 and (starts[1:] > ends[:-1]).all()
    inside = [bool(((starts <= r) & (r < ends)).any()) for r in released]
    assert not any(inside)


DRIFT = {'model': 'drifting_delay', 'level_ms': {'dist': 'uniform', 'low': 0.0, 'high': 80.0},
         'hold_ms': {'dist': 'exponential', 'mean': 300.0}}


def test_the_batched_drifting_delay_drifts_as_the_scalar_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same levels (uniform 0-80 ms) held as long (runs of one level), asked of the scalar stage once a hold."""
    send, at = times(6)
    scalar = scalar_run(DRIFT, send, at) - at
    calls = []
    arrival = DriftingDelay.arrival
    monkeypatch.setattr(DriftingDelay, 'arrival', lambda self, *a: calls.append(1) or arrival(self, *a))
    batch, rng = DriftBatch([build_stage(DRIFT) for _ in range(ENVS)]), np.random.default_rng(7)
    batched = np.stack([batch.meet(np.arange(ENVS), send[:, k], at[:, k], rng)[0] for k in range(TICKS)], axis=1) - at
    # messages a second apart (a level holds 300 ms on average) are close to independent, as the test assumes
    assert stats.ks_2samp(scalar[:, ::50].ravel(), batched[:, ::50].ravel()).pvalue > 1e-3
    assert batched.mean() == pytest.approx(0.04, rel=0.05)
    hold_s, hold_b = runs(np.diff(scalar, axis=1) == 0), runs(np.diff(batched, axis=1) == 0)
    assert hold_b.mean() == pytest.approx(hold_s.mean(), rel=0.1)
    assert len(calls) < ENVS * (1 + TICKS * DT_S / 0.3 * 1.2)  # one call a hold (300 ms), not one a message
