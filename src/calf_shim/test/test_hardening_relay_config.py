"""Hostile relay configs (class 2, generic shim): wrong shapes, giant values and bad depths are one-line
ConfigErrors of bounded length."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from calf_core.errors import ConfigError
from calf_shim.topic_relay_config import load_relay_config

ENTRY = {'in_topic': '/a', 'out_topic': '/b', 'type': 'std_msgs/msg/String', 'direction': 'uplink',
         'profile': 'wifi_normal'}


@pytest.mark.parametrize('doc, message', [
    ([{**ENTRY, 'profile': 'x' * 5000}], 'profile must be a profile name'),
    ([{**ENTRY, 'profile': 'wifi\x00normal'}], 'profile must be a profile name'),
    ([{**ENTRY, 'profile': ['wifi_normal']}], 'profile must be a profile name'),
    ([{**ENTRY, 'profile': {'name': 'x'}}], 'profile must be a profile name'),
    ([{**ENTRY, 'qos': {'depth': 10 ** 11}}], r'qos depth must be an integer in \[1, 10000\]'),
    ([{**ENTRY, 'qos': {'depth': 1e11}}], r'qos depth must be an integer'),
    ([{**ENTRY, 'qos': {'depth': 10 ** 400}}], 'an integer of'),
    ([{**ENTRY, 'qos': {'reliability': ['reliable']}}], 'qos reliability must be one of'),
    ([{**ENTRY, 'qos': {'durability': {'a': 1}}}], 'qos durability must be one of'),
    ([{**ENTRY, 'qos': ['depth', 10]}], 'qos must be a mapping'),
    ([{**ENTRY, 'direction': ['uplink']}], 'direction must be one of'),
    ([{**ENTRY, 'in_topic': {'secret': 'hunter2' * 100}}], 'in_topic must be a ROS topic name'),
    ({'entries': [ENTRY]}, 'must be a non-empty YAML list'),
    ('hunter2', 'must be a non-empty YAML list'),
    ([['hunter2']], 'must be a mapping with keys'),
])
def test_hostile_relay_configs_are_one_line(tmp_path: Path, doc: Any, message: str) -> None:
    path = tmp_path / 'relay.yaml'
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=message) as info:
        load_relay_config(path)
    text = str(info.value)
    assert '\n' not in text and len(text) < 400
