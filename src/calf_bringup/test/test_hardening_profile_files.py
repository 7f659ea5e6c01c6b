"""Hostile profile, spec and trace files through `calf` (issue #28): each is one line and exit 2, at once;
a long trace replay round-trips through `calf trace to-profile --replay`; `calf profile schema` shows bounds."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from calf_bringup.cli import main
from calf_core.bags import read_trace_bag
from calf_core.profile_schema import MAX_STAGES, MIN_EVENT_MS
from calf_core.profiles import load_profile, trace_profile


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    start = time.perf_counter()
    assert main(argv) == 2
    assert time.perf_counter() - start < 10.0
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and err.startswith('calf '), err
    return err


@pytest.mark.parametrize('text, message', [
    ('uplink: [{model: stall, duration_ms: 1.0e-300, gap_ms: 1.0e-300}]\ndownlink: same\n',
     r'stall: duration_ms must be in [1, 60000] ms, got 1e-300'),
    ('uplink: [{model: drifting_delay, level_ms: 5, hold_ms: 1.0e-300}]\ndownlink: same\n',
     r'drifting_delay: hold_ms must be in [1, 3.6e+06] ms, got 1e-300'),
    ('uplink: [{model: stall, duration_ms: 5, rate_hz: 1.0e-300}]\ndownlink: same\n',
     'stall: rate_hz must be in [0.000277778, 1000] Hz, got 1e-300'),
])
def test_tiny_times_are_one_line_naming_key_value_and_range(tmp_path: Path, text: str, message: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / 'tiny.yaml'
    path.write_text(text)
    assert message in _refused(['profile', 'show', str(path), '--samples', '10'], capsys)


def test_a_symlink_to_another_file_is_refused_without_quoting_it(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / 'secret'
    secret.write_text('hunter2\n')
    link = tmp_path / 'net.yaml'
    link.symlink_to(secret)
    err = _refused(['profile', 'show', str(link)], capsys)
    assert 'is not a network profile' in err and 'hunter2' not in err


@pytest.mark.parametrize('argv', [['profile', 'show', '{}'], ['train', '--env-spec', '{}', '--out', '{out}']])
def test_a_fifo_is_refused_at_once(tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / 'fifo.yaml'
    os.mkfifo(fifo)
    err = _refused([a.format(str(fifo), out=tmp_path / 'ckpt') for a in argv], capsys)
    assert 'not a regular file' in err


def test_imports_as_one_string_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / 'task.yaml'
    spec.write_text('env: CartPole-v1\ndt: 0.02\nimports: gymnasium\n')
    err = _refused(['train', '--env-spec', str(spec), '--out', str(tmp_path / 'ckpt')], capsys)
    assert 'imports must be a list of at most 64 module names such as [gymnasium]' in err


def test_trace_info_plot_into_a_missing_directory_is_one_line(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bag = tmp_path / 'bag'
    assert main(['trace', 'synth', '--profile', 'wifi_normal', '--duration', '2', '--out', str(bag)]) == 0
    capsys.readouterr()
    err = _refused(['trace', 'info', str(bag), '--plot', str(tmp_path / 'missing' / 'x.png')], capsys)
    assert 'cannot write' in err and 'directory must exist' in err and not (tmp_path / 'missing').exists()


def test_a_replay_profile_round_trips_through_to_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag, out = tmp_path / 'bag', tmp_path / 'replay.yaml'
    assert main(['trace', 'synth', '--profile', 'wifi_degraded', '--duration', '20', '--out', str(bag)]) == 0
    assert main(['trace', 'to-profile', str(bag), '--replay', '--mode', 'loop', '--out', str(out)]) == 0
    capsys.readouterr()
    assert out.read_text().startswith('{')  # one JSON object, series in the compact form
    loaded = load_profile(str(out))
    direct = trace_profile(read_trace_bag(bag), 'replay', 'loop')
    for mine, theirs in zip(loaded.uplink + loaded.downlink, direct.uplink + direct.downlink):
        assert np.array_equal(mine['delays_ms'], theirs['delays_ms'])
        assert np.array_equal(mine['lost'], theirs['lost'])
    assert main(['profile', 'show', str(out), '--samples', '100', '--json']) == 0
    assert '<1000 values>' in capsys.readouterr().out


def test_profile_schema_shows_the_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['profile', 'schema']) == 0
    text = capsys.readouterr().out
    assert f'duration_ms: distribution, ms, default required, [{MIN_EVENT_MS:g}, 60000] ms' in text
    assert f'at most {MAX_STAGES} stages' in text and 'compute_ms: number, ms, default 1.0, [0, 60000] ms' in text
    assert main(['profile', 'schema', '--json']) == 0
    assert 'exclusiveMinimum' not in capsys.readouterr().out  # every lower bound is closed


def test_a_fifo_as_a_bag_or_in_one_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / 'trace.mcap'
    os.mkfifo(fifo)
    bag = tmp_path / 'bag'
    bag.mkdir()
    os.mkfifo(bag / 'metadata.yaml')
    for path in (fifo, bag):
        assert 'not a regular file' in _refused(['trace', 'info', str(path)], capsys)


@pytest.mark.parametrize('argv, message', [
    (['trace', 'info', 'bag', '--stall-ms', '1e308'], 'argument --stall-ms: must be in [1, 3.6e+06]'),
    (['trace', 'info', 'bag', '--stall-ms', '1e-300'], 'argument --stall-ms: must be in [1, 3.6e+06]'),
    (['trace', 'import', 'bag', '--out', 'x', '--min-delay-ms', '-1'], 'argument --min-delay-ms'),
    (['trace', 'record', '--out', 'x', '--loss-timeout', '1e-300'], 'argument --loss-timeout'),
    (['trace', 'record', '--out', 'x', '--flush-period', 'inf'], 'argument --flush-period'),
    (['trace', 'synth', '--profile', 'wifi_normal', '--out', 'x', '--dt', '1e-300'], 'argument --dt: must be in [0.0001'),
    (['profile', 'show', 'wifi_normal', '--dt', '1e-300'], 'argument --dt: must be in [0.0001, 60]'),
])
def test_trace_and_profile_times_have_closed_bounds(argv: list[str], message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count('\n') == 1 and message in err, err
