"""Outages in the profile schema: shared stages (one process both directions meet), Gilbert-Elliott in
time, a stall's start-to-start period, the harsh built-in profiles, and what the schema refuses."""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from calf_core.envs import make_networked_env
from calf_core.errors import ConfigError
from calf_core.link import Link
from calf_core.models import MAX_RENEWALS, build_stage
from calf_core.profile_schema import json_schema, schema_text
from calf_core.profiles import NETWORKS_DIR, load_profile, profile_from_dict, sample_e2e
from calf_core.vector_networked import VectorNetworkedCartPole

STALL = {'model': 'stall', 'duration_ms': 120, 'period_ms': {'dist': 'uniform', 'low': 400, 'high': 600}}
GE_TIME = {'model': 'gilbert_elliott', 'mean_good_ms': 300, 'mean_bad_ms': 200, 'loss_good': 0.0, 'loss_bad': 1.0}
HARSH = ('outage_burst', 'scan_stall', 'congested_uplink', 'shared_outage')


def both_ways(profile_data: dict, times: np.ndarray, seed: int = 0) -> tuple[list, list]:
    """Send one message each way at each time (uplink first), through one pair of links: their arrivals."""
    uplink, downlink = profile_from_dict(profile_data, 'x').make_links(np.random.default_rng(seed))
    up, down = [], []
    for t in times.tolist():
        up.append(uplink.transmit(t))
        down.append(downlink.transmit(t))
    return up, down


def test_a_shared_stall_holds_both_directions_over_the_same_intervals():
    times = np.arange(0.0, 30.0, 0.005)
    up, down = both_ways({'uplink': [], 'downlink': 'same', 'shared': [STALL]}, times)
    assert up == down  # the same instants meet the same stall: held to the same end
    held = sum(a[0] > t for a, t in zip(up, times.tolist()))
    assert 0.15 < held / len(times) < 0.3  # about 120 ms in every 500
    own_up, own_down = both_ways({'uplink': [STALL], 'downlink': 'same'}, times)  # each direction its own process
    assert own_up != own_down


def test_a_shared_gilbert_elliott_drops_both_directions_in_the_same_periods():
    times = np.arange(0.0, 60.0, 0.01)
    up, down = both_ways({'uplink': [], 'downlink': 'same', 'shared': [GE_TIME]}, times)
    lost_up, lost_down = np.array([not a for a in up]), np.array([not a for a in down])
    assert np.array_equal(lost_up, lost_down)
    assert lost_up.mean() == pytest.approx(0.4, abs=0.06)  # 200 ms bad in every 500 ms
    own_up, own_down = both_ways({'uplink': [GE_TIME], 'downlink': 'same'}, times)
    assert np.mean([bool(a) != bool(b) for a, b in zip(own_up, own_down)]) > 0.3  # independent chains


def test_a_shared_stage_comes_after_each_directions_own_stages_at_the_time_the_message_has_then():
    """An uplink message 50 ms on its way meets the shared stall 50 ms after its send: the downlink message
    sent 50 ms later (no delay of its own) meets it at the same instant and leaves with it."""
    data = {'uplink': [{'model': 'fixed_delay', 'latency_ms': 50}], 'downlink': [], 'shared': [STALL]}
    uplink, downlink = profile_from_dict(data, 'x').make_links(np.random.default_rng(3))
    held = 0
    for t in np.arange(0.0, 20.0, 0.01).tolist():
        [up] = uplink.transmit(t)
        [down] = downlink.transmit(t + 0.05)
        assert up == down
        held += up > t + 0.05
    assert held > 200


@pytest.mark.slow
def test_the_shared_process_runs_on_across_episodes_and_through_the_vector_env():
    profile = load_profile('shared_outage')
    env = make_networked_env('cartpole', profile, seed=0)
    for episode in range(30):
        env.reset(seed=0 if episode == 0 else None)
        done, step = False, 0
        while not done:
            step += 1
            _, _, terminated, truncated, _ = env.step(step % 2)
            done = terminated or truncated
    shared = env.uplink._stages[-1].process
    assert shared is env.downlink._stages[-1].process  # one process, met by both directions
    assert env.uplink.stats.sent > 300
    vec = VectorNetworkedCartPole(4, profile, 1)
    vec.reset(seed=0)
    for _ in range(300):
        vec.step(np.zeros(4, np.int64))
    (up, up_direction), (down, down_direction) = vec.uplink.shared, vec.downlink.shared
    assert up is down and (up_direction, down_direction) == (0, 1)  # per env, one process for both directions
    assert len({id(process) for process in up.processes}) == 4


def burst_seconds(stage_spec: dict, dt_s: float, duration_s: float = 2000.0, seed: int = 0) -> float:
    """The mean length, in seconds, of a run of lost messages sent every dt_s (loss_bad 1, loss_good 0)."""
    link = Link([build_stage(stage_spec)], np.random.default_rng(seed))
    lost = np.array([not link.transmit(t) for t in np.arange(0.0, duration_s, dt_s).tolist()])
    edges = np.diff(np.r_[0, lost.astype(np.int8), 0])
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    return float(runs.mean() * dt_s)


def test_gilbert_elliott_in_time_lasts_as_long_in_seconds_whatever_the_message_rate():
    in_time = {**GE_TIME, 'mean_good_ms': 1500, 'mean_bad_ms': 400}
    fast, slow = burst_seconds(in_time, 0.01), burst_seconds(in_time, 0.05)
    assert fast == pytest.approx(0.4, rel=0.12)
    assert slow == pytest.approx(fast, rel=0.15)  # the burst is the same length at 100 Hz and at 20 Hz
    per_message = {'model': 'gilbert_elliott', 'p_good_to_bad': 0.01, 'p_bad_to_good': 0.1, 'loss_good': 0.0,
                   'loss_bad': 1.0}
    assert burst_seconds(per_message, 0.05, 500.0) > 3 * burst_seconds(per_message, 0.01, 500.0)


def stall_starts(spec: dict, duration_s: float = 120.0) -> np.ndarray:
    """Start times of the stalls a 1 ms probe finds (the first probe each stall holds)."""
    link = Link([build_stage(spec)], np.random.default_rng(1))
    times = np.arange(0.0, duration_s, 0.001)
    held = np.array([link.transmit(t)[0] > t for t in times.tolist()])
    return times[1:][held[1:] & ~held[:-1]]


@pytest.mark.slow
def test_a_distribution_period_spaces_stalls_from_start_to_start():
    duration = {'dist': 'uniform', 'low': 100, 'high': 300}
    spacing = np.diff(stall_starts({'model': 'stall', 'duration_ms': duration,
                                    'period_ms': {'dist': 'fixed', 'value': 1000}}))
    assert spacing == pytest.approx(np.full(spacing.size, 1.0), abs=0.0015)  # whatever each stall lasted
    end_to_start = np.diff(stall_starts({'model': 'stall', 'duration_ms': duration, 'gap_ms': 800}))
    assert end_to_start.min() < 0.92 and end_to_start.max() > 1.08  # gap_ms: spacing = duration + gap
    drawn = np.diff(stall_starts({'model': 'stall', 'duration_ms': 50,
                                  'period_ms': {'dist': 'uniform', 'low': 500, 'high': 1500}}, 300.0))
    assert drawn.min() >= 0.499 and drawn.max() <= 1.501 and drawn.mean() == pytest.approx(1.0, rel=0.08)


def test_overlapping_stalls_merge_and_cost_stays_bounded():
    spec = {'model': 'stall', 'duration_ms': {'dist': 'uniform', 'low': 1, 'high': 1000},
            'period_ms': {'dist': 'exponential', 'mean': 600}}
    link = Link([build_stage(spec)], np.random.default_rng(0))
    for t in np.arange(0.0, 50.0, 0.02).tolist():
        [arrive] = link.transmit(t)
        assert arrive >= t
    ge = build_stage({**GE_TIME, 'mean_good_ms': 1, 'mean_bad_ms': 1})
    link = Link([ge], np.random.default_rng(0))
    link.transmit(0.0)
    start = time.perf_counter()
    link.transmit(3600.0)  # an hour idle: the chain re-enters its stationary regime close to the message
    assert time.perf_counter() - start < 0.5
    assert len(ge.windows._starts) <= MAX_RENEWALS + 1


@pytest.mark.parametrize(('data', 'message'), [
    ({'uplink': [{**GE_TIME, 'p_good_to_bad': 0.1}], 'downlink': 'same'},
     'gilbert_elliott: give p_good_to_bad and p_bad_to_good (per message), or mean_good_ms and mean_bad_ms'),
    ({'uplink': [{'model': 'gilbert_elliott', 'mean_good_ms': 100, 'loss_good': 0, 'loss_bad': 1}],
      'downlink': 'same'}, 'got mean_good_ms'),
    ({'uplink': [{**GE_TIME, 'mean_bad_ms': 0.5}], 'downlink': 'same'},
     'gilbert_elliott: mean_bad_ms must be in [1, 3.6e+06] ms, got 0.5'),
    ({'uplink': [{**GE_TIME, 'mean_good_ms': 1e9}], 'downlink': 'same'}, 'mean_good_ms must be in [1, 3.6e+06] ms'),
    ({'uplink': [{**STALL, 'gap_ms': 100}], 'downlink': 'same'}, 'stall: give exactly one of gap_ms, period_ms'),
    ({'uplink': [{**STALL, 'mode': 'random'}], 'downlink': 'same'}, 'stall: mode goes with a number period_ms'),
    ({'uplink': [{**STALL, 'period_ms': {'dist': 'uniform', 'low': 50, 'high': 100}}], 'downlink': 'same'},
     'the mean duration_ms must be < the period (75 ms), got 120'),
    ({'uplink': [{**STALL, 'period_ms': {'dist': 'exponential', 'mean': 0.1}}], 'downlink': 'same'},
     'period_ms (exponential): mean must be in [1, 3.6e+06] ms, got 0.1'),
    ({'uplink': [], 'downlink': 'same', 'shared': [{'model': 'lognormal_delay', 'median_ms': 5, 'sigma': 1}]},
     "profile 'bad' shared[0]: 'lognormal_delay' cannot be shared"),
    ({'uplink': [], 'downlink': 'same', 'shared': [{'model': 'gilbert_elliott', 'p_good_to_bad': 0.1,
                                                    'p_bad_to_good': 0.1, 'loss_good': 0, 'loss_bad': 1}]},
     "shared[0]: 'gilbert_elliott' cannot be shared"),
    ({'uplink': [], 'downlink': 'same', 'shared': STALL}, 'shared must be a list of at most 32 stage specs'),
    ({'uplink': [], 'downlink': 'same', 'shared': [{**STALL, 'duration_ms': 0}]},
     "profile 'bad' shared[0]: stall: duration_ms must be in [1, 60000] ms, got 0"),
])
def test_the_schema_refuses_bad_outage_keys_in_one_line(data, message):
    with pytest.raises(ConfigError) as info:
        profile_from_dict(data, 'bad')
    assert message in str(info.value) and '\n' not in str(info.value)


def test_the_schema_shows_the_new_keys():
    text = schema_text()
    assert 'shared: stages' in text and 'mean_good_ms: number, ms, default -, [1, 3.6e+06] ms' in text
    assert 'period_ms: number|distribution, ms, default -, [1, 3.6e+06] ms' in text
    schema = json_schema()
    assert 'shared' in schema['properties']
    ge = next(s for s in schema['$defs']['stage']['oneOf'] if s['title'] == 'gilbert_elliott')
    assert ge['properties']['mean_bad_ms'] == {'description': 'in time: mean time in the bad state (mean burst) (ms)',
                                               'type': 'number', 'minimum': 1.0, 'maximum': 3_600_000.0}
    assert ge['required'] == ['model', 'loss_good', 'loss_bad']


@pytest.mark.parametrize('name', HARSH)
def test_harsh_profiles_state_their_sampled_figures(name):
    header = (NETWORKS_DIR / f'{name}.yaml').read_text()
    p50, p95, loss = map(float, re.search(r'p50 ([\d.]+) ms, p95 ([\d.]+) ms, round-trip loss ([\d.]+) %',
                                          header).groups())
    stats = sample_e2e(load_profile(name), 20000, 1)
    assert stats.p50_ms == pytest.approx(p50, rel=0.1)
    assert stats.p95_ms == pytest.approx(p95, rel=0.15)
    assert 100 * stats.round_trip_loss == pytest.approx(loss, abs=max(0.3 * loss, 0.5))


def test_harsh_profiles_have_their_shapes():
    assert load_profile('shared_outage').shared and load_profile('scan_stall').shared
    up, down = load_profile('congested_uplink').make_links(np.random.default_rng(0))
    up_ms = np.mean([a[0] - t for t in range(2000) if (a := up.transmit(float(t)))]) * 1e3
    down_ms = np.mean([down.transmit(float(t))[0] - t for t in range(2000)]) * 1e3
    assert up_ms > 5 * down_ms
    burst = load_profile('outage_burst').uplink[-1]
    assert burst['model'] == 'gilbert_elliott' and 'mean_bad_ms' in burst
