"""Adversarial files (class 2): every YAML and JSON reader is bounded in size, depth and alias expansion,
and every refusal is one ConfigError line that quotes no file content."""
from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import numpy as np
import pytest

from calf_core.errors import ConfigError
from calf_core.link import Link
from calf_core.models import build_stage
from calf_core.profile_schema import (
    MAX_DELAY_MS,
    MAX_PROFILE_BYTES,
    MAX_REPLAY_VALUES,
    MAX_STAGES,
    MIN_DELAY_MS,
    MIN_EVENT_MS,
)
from calf_core.profiles import load_profile, profile_from_dict, sample_e2e
from calf_core.yaml_files import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, parse_yaml, read_json, read_yaml


def bomb(levels: int, width: int) -> str:
    """The billion-laughs document: each level lists the previous one `width` times."""
    lines, prev = ['l0: &l0 [' + ', '.join(['"lol"'] * width) + ']'], 'l0'
    for i in range(1, levels):
        lines.append(f'l{i}: &l{i} [' + ', '.join([f'*{prev}'] * width) + ']')
        prev = f'l{i}'
    return '\n'.join(lines) + '\n'


HOSTILE_YAML = {
    'alias bomb 9x9': (bomb(9, 9), 'expands to more than'),
    'alias bomb 30x2': (bomb(30, 2), 'expands to more than'),
    'alias bomb in a mapping': ('a: &a {x: 1, y: 2}\n' + ''.join(
        f'b{i}: &b{i} {{p: *{"a" if i == 0 else f"b{i - 1}"}, q: *{"a" if i == 0 else f"b{i - 1}"}}}\n'
        for i in range(25)), 'expands to more than'),
    'recursive alias': ('&a [*a]', 'nests deeper'),
    'deep lists': ('[' * 5000 + ']' * 5000, 'nests deeper'),
    'deep block mappings': ('a:\n' + ''.join(' ' * i + 'b:\n' for i in range(1, 200)), 'nests deeper'),
    'binary garbage': ('\x00\x01\x02\xff', 'unacceptable character'),
    'a 5000-digit integer': ('x: ' + '9' * 5000, 'not valid YAML'),
    'python object tag': ('!!python/object/apply:os.system ["echo pwned"]', 'could not determine a constructor'),
    'unhashable key': ('? [1, 2]\n: 3', 'unhashable key'),
    'bad date': ('when: 2026-13-45', 'not valid YAML'),
}


@pytest.mark.parametrize('case', HOSTILE_YAML)
def test_hostile_yaml_is_one_line_in_bounded_time_and_memory(case: str) -> None:
    text, message = HOSTILE_YAML[case]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=message) as info:
        parse_yaml(text, 'test file')
    assert time.perf_counter() - start < 2.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 100_000  # kB
    assert '\n' not in str(info.value) and str(info.value).startswith('test file ')


def test_yaml_within_the_bounds_loads_with_anchors_and_merge_keys() -> None:
    text = 'base: &b {latency_ms: 5}\nup: *b\ndown: {<<: *b, jitter_ms: 1}\n' + 'deep: ' + '[' * (MAX_DEPTH - 2) \
        + ']' * (MAX_DEPTH - 2) + '\n'
    data = parse_yaml(text, 'ok')
    assert data['up'] == {'latency_ms': 5} and data['down'] == {'latency_ms': 5, 'jitter_ms': 1}
    assert parse_yaml(bomb(2, 100), 'ok')['l1'][99] == ['lol'] * 100  # 10,101 nodes: under MAX_NODES
    assert MAX_NODES > 10_101


def test_yaml_errors_do_not_quote_the_file(tmp_path: Path) -> None:
    secret = tmp_path / 'secrets.yaml'
    secret.write_text('password: hunter2\n  token: [abc\n')
    with pytest.raises(ConfigError) as info:
        read_yaml(secret, 'profile')
    assert 'hunter2' not in str(info.value) and 'abc' not in str(info.value)
    assert 'line 2' in str(info.value)


@pytest.mark.parametrize('reader', [read_yaml, read_json])
def test_oversized_non_utf8_and_missing_files_are_refused_before_parsing(tmp_path: Path, reader) -> None:
    big = tmp_path / 'big.yaml'
    with big.open('wb') as stream:  # sparse: the reader must stop at the limit, not read 1 GB
        stream.truncate(1 << 30)
    with pytest.raises(ConfigError, match=f'larger than {MAX_FILE_BYTES} bytes'):
        reader(big, 'profile')
    latin = tmp_path / 'latin.yaml'
    latin.write_bytes(b'name: caf\xe9\n')
    with pytest.raises(ConfigError, match='not UTF-8'):
        reader(latin, 'profile')
    with pytest.raises(ConfigError, match='cannot read profile'):
        reader(tmp_path / 'missing.yaml', 'profile')
    with pytest.raises(ConfigError, match='cannot read profile'):
        reader(tmp_path, 'profile')  # a directory


HOSTILE_JSON = {
    'deep nesting': ('[' * 100_000 + ']' * 100_000, 'nests too deeply'),
    'nesting past the depth bound': ('{"a":' * (MAX_DEPTH + 1) + '1' + '}' * (MAX_DEPTH + 1), 'nests deeper'),
    'a 5000-digit integer': ('{"frames": ' + '9' * 5000 + '}', 'not valid JSON'),
    'NaN': ('{"seed": NaN}', 'NaN is not a JSON number'),
    'Infinity': ('[Infinity]', 'Infinity is not a JSON number'),
    'truncated': ('{"agent": ', 'not valid JSON'),
}


@pytest.mark.parametrize('case', HOSTILE_JSON)
def test_hostile_json_is_one_line(tmp_path: Path, case: str) -> None:
    text, message = HOSTILE_JSON[case]
    path = tmp_path / 'meta.json'
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        read_json(path, 'checkpoint meta')
    assert '\n' not in str(info.value)


def test_profile_files_go_through_the_bounded_reader(tmp_path: Path) -> None:
    path = tmp_path / 'bomb.yaml'
    path.write_text(bomb(9, 9))
    start = time.perf_counter()
    with pytest.raises(ConfigError, match='expands to more than'):
        load_profile(str(path))
    assert time.perf_counter() - start < 2.0


# --- issue #28: closed bounds, bounded stages, non-regular files, no echo of refused files ---------

TINY = {'stall duration': {'model': 'stall', 'duration_ms': 1e-300, 'gap_ms': 1e-300},
        'stall gap': {'model': 'stall', 'duration_ms': 5, 'gap_ms': {'dist': 'exponential', 'mean': 1e-300}},
        'stall period': {'model': 'stall', 'duration_ms': 1e-300, 'period_ms': 1e-299},
        'stall rate': {'model': 'stall', 'duration_ms': 5, 'rate_hz': 1e-300},
        'drifting hold': {'model': 'drifting_delay', 'level_ms': 5, 'hold_ms': 1e-300},
        'drifting lognormal hold': {'model': 'drifting_delay', 'level_ms': 5,
                                    'hold_ms': {'dist': 'lognormal', 'median': 1e-300, 'sigma': 1}},
        'lognormal median': {'model': 'lognormal_delay', 'median_ms': 1e-300, 'sigma': 1},
        'gamma scale': {'model': 'gamma_delay', 'shape': 1e-300, 'scale_ms': 1},
        'pareto scale': {'model': 'pareto_delay', 'scale_ms': 1e-300, 'shape': 2},
        'gilbert-elliott exit': {'model': 'gilbert_elliott', 'p_good_to_bad': 0.1, 'p_bad_to_good': 1e-300,
                                 'loss_good': 0, 'loss_bad': 1}}


@pytest.mark.parametrize('case', TINY)
def test_positive_values_have_a_closed_lower_bound(case: str) -> None:
    with pytest.raises(ConfigError, match=r'must be in \[[0-9.e+-]+, [0-9.e+-]+\]') as info:
        build_stage(TINY[case])
    assert '\n' not in str(info.value) and 'e-300' in str(info.value)  # names the value and the range


def _extreme_stages() -> dict[str, dict]:
    """Every stage at the edges of its bounds: the most events per unit time, the widest draws."""
    short, fast = {'dist': 'lognormal', 'median': MIN_EVENT_MS, 'sigma': 5.0}, {'dist': 'fixed', 'value': MIN_EVENT_MS}
    return {
        'fixed': {'model': 'fixed_delay', 'latency_ms': MAX_DELAY_MS},
        'gaussian': {'model': 'gaussian_delay', 'mean_ms': 0, 'std_ms': MAX_DELAY_MS},
        'lognormal': {'model': 'lognormal_delay', 'median_ms': MAX_DELAY_MS, 'sigma': 5},
        'gamma tiny shape': {'model': 'gamma_delay', 'shape': 1e-6, 'scale_ms': MAX_DELAY_MS},
        'gamma from moments': {'model': 'gamma_delay', 'mean_ms': MIN_DELAY_MS, 'std_ms': MAX_DELAY_MS},
        'pareto': {'model': 'pareto_delay', 'scale_ms': MAX_DELAY_MS, 'shape': 0.5},
        'empirical': {'model': 'empirical_delay', 'bins_ms': list(np.linspace(0, MAX_DELAY_MS, 1001)),
                      'probs': [1.0] * 1000},
        'bernoulli': {'model': 'bernoulli_loss', 'p': 1},
        'gilbert-elliott': {'model': 'gilbert_elliott', 'p_good_to_bad': 1, 'p_bad_to_good': 1e-9,
                            'loss_good': 1, 'loss_bad': 1},
        'stall fixed': {'model': 'stall', 'duration_ms': fast, 'gap_ms': fast},
        'stall lognormal': {'model': 'stall', 'duration_ms': short, 'gap_ms': short},
        'stall exponential': {'model': 'stall', 'duration_ms': {'dist': 'exponential', 'mean': MIN_EVENT_MS},
                              'gap_ms': {'dist': 'exponential', 'mean': MIN_EVENT_MS}},
        'stall rate': {'model': 'stall', 'duration_ms': MIN_EVENT_MS, 'rate_hz': 999, 'mode': 'random'},
        'drifting fixed': {'model': 'drifting_delay', 'level_ms': MAX_DELAY_MS, 'hold_ms': fast},
        'drifting lognormal': {'model': 'drifting_delay', 'level_ms': {'dist': 'lognormal', 'median': MAX_DELAY_MS,
                                                                         'sigma': 5}, 'hold_ms': short},
        'bandwidth': {'model': 'bandwidth', 'rate_kbps': 1, 'queue_packets': 100_000},
        'duplicate': {'model': 'duplicate', 'p': 1, 'extra_delay_ms': MAX_DELAY_MS},
        'trace replay': {'model': 'trace_replay', 'delays_ms': [MAX_DELAY_MS] * 1000, 'mode': 'random_offset'},
    }


@pytest.mark.parametrize('case', list(_extreme_stages()))
def test_every_stage_at_its_bounds_builds_and_samples_in_bounded_time_and_memory(case: str) -> None:
    """Alone, behind a Pareto delay that throws messages hours ahead, and over a link idle for a day."""
    spec = _extreme_stages()[case]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    for chain in ([spec], [_extreme_stages()['pareto'], spec]):
        link = Link([build_stage(s) for s in chain], np.random.default_rng(0), reorder=True)
        for k in range(2000):
            link.transmit(k * 0.02)
        for k in range(20):
            link.transmit(86_400.0 * (k + 1))  # one message a day
    assert time.perf_counter() - start < 20.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 100_000  # kB


@pytest.mark.slow
def test_sampling_a_legal_profile_with_the_fastest_stalls_is_bounded() -> None:
    profile = profile_from_dict({'uplink': [{'model': 'stall', 'duration_ms': MIN_EVENT_MS, 'gap_ms': MIN_EVENT_MS},
                                            {'model': 'drifting_delay', 'level_ms': 1, 'hold_ms': MIN_EVENT_MS}],
                                 'downlink': 'same'}, 'fast')
    start = time.perf_counter()
    stats = sample_e2e(profile, n=2000, seed=0, dt_s=60.0)  # a minute between messages: 60,000 cycles each
    assert stats.n == 2000 and time.perf_counter() - start < 20.0


def test_a_direction_holds_at_most_max_stages() -> None:
    stage = {'model': 'fixed_delay', 'latency_ms': 1}
    assert len(profile_from_dict({'uplink': [stage] * MAX_STAGES, 'downlink': 'same'}, 'ok').uplink) == MAX_STAGES
    with pytest.raises(ConfigError, match=f'at most {MAX_STAGES} stage specs'):
        profile_from_dict({'uplink': [stage] * (MAX_STAGES + 1), 'downlink': 'same'}, 'long')


def test_a_file_that_is_not_a_profile_is_refused_without_quoting_it(tmp_path: Path) -> None:
    secret = tmp_path / 'secret.txt'
    for text in ('hunter2\n', 'password: hunter2\nname: hunter2\n', '[hunter2, 1]\n', '{"token": "hunter2"}\n'):
        secret.write_text(text)
        link = tmp_path / 'net.yaml'
        link.unlink(missing_ok=True)
        link.symlink_to(secret)
        with pytest.raises(ConfigError, match='is not a network profile') as info:
            load_profile(str(link))
        assert 'hunter2' not in str(info.value) and 'token' not in str(info.value) and '\n' not in str(info.value)


@pytest.mark.parametrize('reader', [read_yaml, read_json, lambda p, w: load_profile(str(p))])
def test_a_fifo_is_refused_at_once(tmp_path: Path, reader) -> None:
    fifo = tmp_path / 'net.yaml'
    os.mkfifo(fifo)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match='not a regular file'):
        reader(fifo, 'profile')
    assert time.perf_counter() - start < 2.0


def _replay_json(n: int) -> str:
    delays = ' '.join(['12.345678'] * n)
    lost = '01' * (n // 2) + '0' * (n % 2)
    stage = {'model': 'trace_replay', 'delays_ms': delays, 'lost': lost, 'mode': 'random_offset'}
    return json.dumps({'name': 'long', 'uplink': [stage], 'downlink': [stage]})


@pytest.mark.slow
def test_a_long_replay_in_the_compact_json_form_loads_fast(tmp_path: Path) -> None:
    path = tmp_path / 'long.yaml'
    path.write_text(_replay_json(1_000_000))  # 5.5 hours at 50 Hz: five times the old cap
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    profile = load_profile(str(path))
    uplink, _ = profile.make_links(np.random.default_rng(0))
    assert uplink.transmit(0.0) in ([0.012345678], [])
    assert time.perf_counter() - start < 10.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 400_000  # kB


def test_oversized_replays_are_refused_fast(tmp_path: Path) -> None:
    too_long = tmp_path / 'too_long.yaml'
    too_long.write_text(json.dumps({'uplink': [{'model': 'trace_replay', 'delays_ms': '1 ' * (MAX_REPLAY_VALUES + 1)}],
                                    'downlink': 'same'}))
    big = tmp_path / 'big.yaml'
    with big.open('wb') as stream:
        stream.truncate(MAX_PROFILE_BYTES + 1)
    yaml_replay = tmp_path / 'yaml_replay.yaml'  # the old flow-list form, 3.9 MB: the YAML parser took 52 s
    yaml_replay.write_text('uplink:\n- model: trace_replay\n  delays_ms: [' + ', '.join(['12.5'] * 650_000) + ']\n'
                           'downlink: same\n')
    for path, message, seconds in ((too_long, f'more than {MAX_REPLAY_VALUES} values', 5.0),  # 8 MB read
                                   (big, 'larger than', 1.0),
                                   (yaml_replay, 'write a larger profile as one JSON object', 1.0)):
        start = time.perf_counter()
        with pytest.raises(ConfigError, match=message) as info:
            load_profile(str(path))
        assert time.perf_counter() - start < seconds and '\n' not in str(info.value), path.name


def test_compact_series_refuse_bad_values_with_one_line() -> None:
    base = {'model': 'trace_replay'}
    for value, message in (('1 2 x', 'separated by spaces: one is not a number'), ('1 nan', r'\[1\] must be in'),
                           ('1 -1', r'\[1\] must be in \[0, 60000\] ms, got -1'), ('', 'must hold 1 to')):
        with pytest.raises(ConfigError, match=message):
            build_stage({**base, 'delays_ms': value})
    with pytest.raises(ConfigError, match='string of 0 and 1 characters'):
        build_stage({**base, 'delays_ms': '1 2', 'lost': '0x'})
    with pytest.raises(ConfigError, match='lost must be as long as delays_ms'):
        build_stage({**base, 'delays_ms': '1 2', 'lost': '010'})
    stage = build_stage({**base, 'delays_ms': ' 1\n2.5\t3 ', 'lost': '010'})
    assert stage.delays_s.tolist() == [0.001, 0.0, 0.003] and stage.lost.tolist() == [False, True, False]


@pytest.mark.parametrize('name', ['x' * 300, '/tmp/' + 'y' * 300 + '.yaml', 'z' * 300 + '.mcap'])
def test_a_network_name_longer_than_a_file_name_is_one_line(name: str) -> None:
    with pytest.raises(ConfigError, match='longer than 255 bytes'):
        load_profile(name)
