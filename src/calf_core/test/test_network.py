"""``--network`` has one entry point (``calf_core.network.resolve_network``: a name, a profile file or a trace bag);
``load_profile`` reads profiles only, and the profiles module never reaches the bag reader."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from calf_core import profiles
from calf_core.bags import read_trace_bag, write_trace_bag
from calf_core.errors import ConfigError
from calf_core.network import resolve_network
from calf_core.profiles import load_profile, trace_profile
from calf_core.traces import synth_trace

FIXED = 'uplink: [{model: fixed_delay, latency_ms: 7}]\ndownlink: same\n'


def test_a_name_or_a_profile_file_is_the_profile(tmp_path: Path) -> None:
    assert resolve_network('wifi_normal') == load_profile('wifi_normal')
    (tmp_path / 'fixed.yaml').write_text(FIXED)
    assert resolve_network(tmp_path / 'fixed.yaml') == load_profile(str(tmp_path / 'fixed.yaml'))
    assert resolve_network(tmp_path / 'fixed.yaml').uplink == ({'model': 'fixed_delay', 'latency_ms': 7},)


@pytest.mark.parametrize('name', ['wifi.mcap', 'wifi'], ids=['bag-file', 'bag-directory'])
def test_a_trace_bag_is_its_replay_profile(tmp_path: Path, name: str) -> None:
    bag = tmp_path / name
    write_trace_bag(bag, synth_trace(load_profile('wifi_normal'), 5.0, seed=1))
    profile, expected = resolve_network(str(bag)), trace_profile(read_trace_bag(bag), bag.stem)
    assert (profile.name, profile.description) == ('wifi', expected.description)
    for got, want in ((profile.uplink, expected.uplink), (profile.downlink, expected.downlink)):
        assert [stage['model'] for stage in got] == ['trace_replay']
        assert all(np.array_equal(got[0][key], want[0][key]) for key in ('delays_ms', 'lost'))
        assert len(got[0]['delays_ms']) > 100


def test_load_profile_refuses_a_bag_in_one_line_naming_the_entry_point(tmp_path: Path) -> None:
    bag = tmp_path / 'wifi.mcap'
    write_trace_bag(bag, synth_trace(load_profile('wifi_normal'), 2.0, seed=1))
    with pytest.raises(ConfigError, match='is a trace bag') as info:
        load_profile(bag)
    assert 'resolve_network' in str(info.value) and '\n' not in str(info.value)


@pytest.mark.parametrize('read', [resolve_network, load_profile])
def test_a_name_too_long_for_a_file_system_is_one_line(read) -> None:
    with pytest.raises(ConfigError, match='longer than 255 bytes'):
        read('x' * 300)


def test_the_profiles_module_never_imports_the_bag_reader() -> None:
    tree = ast.parse(Path(profiles.__file__).read_text(encoding='utf-8'))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or '' for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name for name in imported if name.split('.')[0] in ('rosbags', 'mcap') or name == 'calf_core.bags'}
