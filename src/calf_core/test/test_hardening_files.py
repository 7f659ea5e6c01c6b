"""Adversarial files (class 2): every YAML and JSON reader is bounded in size, depth and alias expansion,
and every refusal is one ConfigError line that quotes no file content."""
from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from calf_core.errors import ConfigError
from calf_core.profiles import load_profile
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
