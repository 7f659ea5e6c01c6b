"""Pure tests of calf_core.traces: trace arrays, statistics, synthesis, import, matching and replay profiles."""
from __future__ import annotations

import numpy as np
import pytest

from calf_core.errors import ConfigError, TraceError
from calf_core.profiles import load_profile, profile_from_dict, trace_profile
from calf_core.traces import (
    ActionEvent,
    Direction,
    ObsEvent,
    Sample,
    Trace,
    TraceMatcher,
    burst_lengths,
    fit_profile_dict,
    import_from_messages,
    plot_trace,
    reordered_count,
    stalls,
    synth_trace,
    trace_stats,
)

MS = 1_000_000


def up(seq: int, sent_ms: float, delay_ms: float | None) -> Sample:
    """An uplink row; delay None means lost."""
    lost = delay_ms is None
    return Sample(0, seq, int(sent_ms * MS), 0 if lost else int((sent_ms + delay_ms) * MS), 64, lost)


def down(seq: int, sent_ms: float, delay_ms: float | None) -> Sample:
    return up(seq, sent_ms, delay_ms)._replace(direction=1)


@pytest.mark.parametrize('lost, lengths', [
    ([], []),
    ([0, 0, 0], []),
    ([1], [1]),
    ([1, 1, 0, 1, 0, 0, 1, 1, 1], [2, 1, 3]),
    ([0, 1, 1, 1, 1, 0], [4]),
])
def test_burst_lengths(lost, lengths):
    assert burst_lengths(np.array(lost, dtype=bool)).tolist() == lengths


def test_rows_are_kept_in_send_order_per_direction():
    trace = Trace.from_samples([up(1, 20, 5), down(0, 3, 1), up(0, 0, 50), up(2, 40, None)])
    assert trace.uplink.seq.tolist() == [0, 1, 2]
    assert trace.uplink.lost.tolist() == [False, False, True]
    assert np.allclose(trace.uplink.delays_ms[:2], [50, 5]) and np.isnan(trace.uplink.delays_ms[2])
    assert len(trace.downlink) == 1 and len(trace) == 4
    assert sorted(trace.samples()) == sorted([up(1, 20, 5), down(0, 3, 1), up(0, 0, 50), up(2, 40, None)])


def test_unknown_direction_is_refused():
    with pytest.raises(TraceError, match=r'direction values \[7\]'):
        Trace.from_samples([up(0, 0, 1)._replace(direction=7)])


def test_stats_count_latency_loss_bursts_and_reordering():
    delays = [10, 20, None, None, 30, 5, None, 40]  # row 5 overtakes row 4
    trace = Trace.from_samples([up(k, 20 * k, d) for k, d in enumerate(delays)] + [down(0, 0, 1)])
    stats = trace_stats(trace)
    u = stats['uplink']
    assert (u['messages'], u['delivered'], u['lost'], u['loss_rate']) == (8, 5, 3, 3 / 8)
    assert u['latency_ms']['p50'] == pytest.approx(20.0)
    assert u['latency_ms']['max'] == pytest.approx(40.0)
    assert u['loss_bursts'] == {'count': 2, 'mean_length': 1.5, 'max_length': 2, 'lengths': {'1': 1, '2': 1}}
    assert u['reordered'] == 1 and reordered_count(trace.downlink) == 0
    assert stats['downlink']['messages'] == 1 and stats['samples'] == 9


def test_stalls_are_delivery_gaps_while_a_message_waits():
    # deliveries at 10, 30, then a message sent at 40 waits until 300: a 270 ms stall
    rows = [up(0, 0, 10), up(1, 20, 10), up(2, 40, 260), up(3, 60, 245)]
    found = stalls(Trace.from_samples(rows).uplink, stall_ms=100)
    assert found == [(30 * MS, 300 * MS)]
    stats = trace_stats(Trace.from_samples(rows), stall_ms=100)['uplink']['stalls']
    assert stats['count'] == 1 and stats['max_ms'] == pytest.approx(270.0)
    assert stats['first'] == [{'start_s': 0.03, 'duration_ms': 270.0}]


def test_an_idle_gap_is_not_a_stall():
    rows = [up(0, 0, 10), up(1, 1000, 10)]  # nothing was sent in between
    assert stalls(Trace.from_samples(rows).uplink, stall_ms=100) == []


def test_empty_direction_stats_are_none():
    stats = trace_stats(Trace.from_samples([up(0, 0, 1)]))
    assert stats['downlink']['messages'] == 0
    assert stats['downlink']['latency_ms'] is None and stats['downlink']['loss_rate'] is None


def test_synth_is_seeded_and_follows_the_profile():
    profile = load_profile('delay_only')
    trace = synth_trace(profile, duration_s=2.0, dt_s=0.02, seed=3)
    assert len(trace.uplink) == 100 and len(trace.downlink) == 100
    assert np.allclose(trace.uplink.delays_ms, 25.0) and np.allclose(trace.downlink.delays_ms, 25.0)
    # each action leaves compute_ms after its observation arrived
    assert np.allclose((trace.downlink.sent_ns - trace.uplink.received_ns) / MS, profile.compute_ms)
    noisy = load_profile('full_net_aware')
    a, b = synth_trace(noisy, 5.0, seed=1), synth_trace(noisy, 5.0, seed=1)
    assert a.samples() == b.samples()
    assert a.samples() != synth_trace(noisy, 5.0, seed=2).samples()


def test_synth_rejects_a_bad_duration():
    with pytest.raises(ConfigError, match='duration_s'):
        synth_trace(load_profile('sim_clean'), duration_s=0.0)


def obs(seq: int, stamp_ms: float, log_ms: float, episode: int = 0, final: bool = False) -> ObsEvent:
    return ObsEvent(episode, seq, int(stamp_ms * MS), int(log_ms * MS), 100, final)


def act(obs_seq: int, stamp_ms: float, log_ms: float, episode: int = 0) -> ActionEvent:
    return ActionEvent(episode, obs_seq, int(stamp_ms * MS), int(log_ms * MS), 80)


def test_import_derives_delays_and_losses():
    observations = [obs(0, 0, 5), obs(1, 20, 27), obs(3, 60, 64), obs(3, 60, 90),  # seq 2 lost, 3 duplicated
                    obs(0, 100, 103, episode=1), obs(1, 120, 121, episode=1, final=True)]
    actions = [act(0, 6, 16), act(3, 65, 70), act(0, 104, 110, episode=1)]  # the action for seq 1 is lost
    trace = import_from_messages(observations, actions)
    assert trace.uplink.lost.tolist() == [False, False, True, False, False, False]
    assert trace.uplink.sent_ns[2] == 40 * MS  # interpolated between seq 1 and seq 3
    assert np.allclose(trace.uplink.delays_ms[~trace.uplink.lost], [5, 7, 4, 3, 1])
    # expected actions: every logged non-final observation; (0, 1) never arrived
    assert trace.downlink.lost.tolist() == [False, True, False, False]
    assert np.allclose(trace.downlink.delays_ms[~trace.downlink.lost], [10, 5, 6])


def test_import_counts_lost_actions_from_the_sent_side():
    observations = [obs(0, 0, 5), obs(1, 20, 25), obs(2, 40, 45)]
    sent = [act(0, 6, 6), act(2, 46, 46)]  # the policy skipped observation 1
    trace = import_from_messages(observations, [act(0, 6, 9)], sent_actions=sent)
    assert trace.downlink.lost.tolist() == [False, True]
    assert trace.downlink.sent_ns.tolist() == [6 * MS, 46 * MS]


def test_import_refuses_mixed_clocks_unless_aligned():
    offset_ns = 5 * 10**18  # system-clock log times against steady-clock stamps
    steady = [ObsEvent(0, k, 20 * k * MS, offset_ns + (20 * k + k) * MS, 100, False) for k in range(3)]
    with pytest.raises(TraceError, match='not on one clock'):
        import_from_messages(steady, [act(0, 0, 1)])
    trace = import_from_messages(steady, [act(0, 0, 1)], min_delay_ms=2.0)
    assert np.allclose(trace.uplink.delays_ms, [2, 3, 4])
    assert np.allclose(trace.downlink.delays_ms[~trace.downlink.lost], [2])


def test_matcher_pairs_copies_and_expires_losses():
    m = TraceMatcher(timeout_ns=100)
    assert m.near(Direction.UPLINK, (0, 0), 64, now_ns=0) is None
    assert m.far(Direction.UPLINK, (0, 0), 64, now_ns=30) == Sample(0, 0, 0, 30, 64, False)
    assert m.far(Direction.UPLINK, (0, 0), 64, now_ns=40) is None and m.late == 1  # duplicate
    m.near(Direction.UPLINK, (0, 1), 64, now_ns=50)
    m.near(Direction.DOWNLINK, (0, 0), 32, now_ns=60)
    assert m.expire(now_ns=149) == []
    assert m.expire(now_ns=150) == [Sample(0, 1, 50, 0, 64, True)]
    assert m.far(Direction.DOWNLINK, (0, 0), 32, now_ns=155) == Sample(1, 0, 60, 155, 32, False)
    assert m.far(Direction.UPLINK, (0, 1), 64, now_ns=170) is None and m.late == 2  # after its timeout
    assert m.pending == 0


def test_matcher_waits_for_a_missing_near_copy():
    m = TraceMatcher(timeout_ns=100)
    assert m.far(Direction.UPLINK, (0, 0), 64, now_ns=10) is None
    assert m.near(Direction.UPLINK, (0, 0), 64, now_ns=12) == Sample(0, 0, 12, 10, 64, False)
    m.far(Direction.UPLINK, (0, 1), 64, now_ns=20)
    assert m.expire(now_ns=500) == [] and m.unmatched == 1


def test_matcher_traces_reused_keys_afresh_after_twice_the_timeout():
    m = TraceMatcher(timeout_ns=100)
    m.near(Direction.UPLINK, (0, 0), 64, now_ns=0)
    m.far(Direction.UPLINK, (0, 0), 64, now_ns=10)
    m.expire(now_ns=150)
    assert m.near(Direction.UPLINK, (0, 0), 64, now_ns=150) is None and m.pending == 0  # still a duplicate
    m.expire(now_ns=211)  # a restarted sender counts from 0 again
    m.near(Direction.UPLINK, (0, 0), 64, now_ns=211)
    assert m.far(Direction.UPLINK, (0, 0), 64, now_ns=220) == Sample(0, 1, 211, 220, 64, False)


def test_matcher_bounds_its_pending_messages():
    m = TraceMatcher(timeout_ns=100, max_pending=2)
    for k in range(3):
        m.near(Direction.UPLINK, (0, k), 64, now_ns=k)
    assert m.pending == 2 and m.overflow == 1
    assert [s.seq for s in m.expire(now_ns=1000)] == [1, 2]


def test_trace_profile_replays_the_trace_in_order():
    rows = [up(k, 20 * k, d) for k, d in enumerate([5, None, 30, 12])] + [down(0, 0, 7)]
    profile = trace_profile(Trace.from_samples(rows), 'rec', mode='loop')
    assert profile.uplink[0]['model'] == 'trace_replay' and profile.reorder == (False, False)
    uplink, downlink = profile.make_links(np.random.default_rng(0))
    arrivals = [uplink.transmit(0.02 * k) for k in range(5)]
    assert arrivals == [[pytest.approx(0.005)], [], [pytest.approx(0.07)], [pytest.approx(0.072)],
                        [pytest.approx(0.085)]]  # FIFO as recorded; the trace wraps around
    assert downlink.transmit(1.0) == [pytest.approx(1.007)]


def test_trace_profile_needs_both_directions():
    with pytest.raises(TraceError, match='no downlink samples'):
        trace_profile(Trace.from_samples([up(0, 0, 1)]), 'half')


def test_fitted_profile_matches_loss_and_delay():
    trace = synth_trace(load_profile('full_net_aware'), duration_s=120.0, seed=4)
    profile = profile_from_dict(fit_profile_dict(trace, 'fit'), 'fit')
    refit = synth_trace(profile, duration_s=120.0, seed=5)
    for name in ('uplink', 'downlink'):
        a, b = trace_stats(trace)[name], trace_stats(refit)[name]
        assert b['loss_rate'] == pytest.approx(a['loss_rate'], abs=0.015)
        assert b['latency_ms']['p50'] == pytest.approx(a['latency_ms']['p50'], rel=0.1)
        assert b['latency_ms']['p95'] == pytest.approx(a['latency_ms']['p95'], rel=0.1)


@pytest.mark.slow
def test_plot_writes_a_png(tmp_path):
    png = tmp_path / 'trace.png'
    plot_trace(synth_trace(load_profile('full_net_aware'), 2.0, seed=0), png, title='t')
    assert png.read_bytes()[:4] == b'\x89PNG'
