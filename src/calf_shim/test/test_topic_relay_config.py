"""The generic shim's relay config: parsing, one-line errors, type resolution, QoS mirroring, type checks."""
from __future__ import annotations

from pathlib import Path

import pytest

from calf_core.errors import ConfigError
from calf_core.profiles import load_profile
from calf_core.traces import Direction
from calf_ros.message_types import normalise_type, resolve_type
from calf_ros.qos import QosConfig, mirror_qos, parse_qos
from calf_shim.topic_relay_config import Endpoint, check_types, load_relay_config, parse_entry, parse_relay_config


def entry(**changes: object) -> dict:
    return {'in_topic': '/cmd_vel_raw', 'out_topic': '/cmd_vel', 'type': 'geometry_msgs/msg/Twist',
            'direction': 'downlink', 'profile': 'delay_only', **changes}


def test_an_entry_with_qos_and_a_relative_profile_path(tmp_path: Path) -> None:
    (tmp_path / 'fixed.yaml').write_text('uplink: [{model: fixed_delay, latency_ms: 5}]\ndownlink: same\n')
    parsed = parse_entry(entry(type='geometry_msgs/Twist', profile='fixed.yaml', direction='uplink',
                               qos={'reliability': 'reliable'}), tmp_path)
    assert parsed.type_name == 'geometry_msgs/msg/Twist'
    assert parsed.profile == load_profile(str(tmp_path / 'fixed.yaml'))
    assert parsed.qos == QosConfig('reliable', 'volatile', 10)
    assert parsed.direction is Direction.UPLINK


@pytest.mark.parametrize('changes, message', [
    ({'type': 'Twist'}, "type must look like pkg/msg/Name (e.g. geometry_msgs/msg/Twist), got 'Twist'"),
    ({'direction': 'up'}, "direction must be one of uplink, downlink, got 'up'"),
    ({'profile': 'no_such_profile'}, "unknown network profile 'no_such_profile'"),
    ({'out_topic': '/cmd_vel_raw'}, "in_topic and out_topic are both '/cmd_vel_raw'"),
    ({'in_topic': 'cmd vel'}, "in_topic must be a ROS topic name such as /cmd_vel, got 'cmd vel'"),
    ({'out_topic': '/a//b'}, "out_topic must be a ROS topic name"),
    ({'qos': {'reliability': 'sometimes'}}, "qos reliability must be one of best_effort, reliable, got 'sometimes'"),
    ({'qos': {'depth': 0}}, 'qos depth must be an integer in [1, 10000], got 0'),
    ({'qos': {'history': 'all'}}, 'qos must be a mapping with keys among reliability, durability, depth'),
    ({'rate': 10}, "unknown keys ['rate'], missing keys []"),
])
def test_bad_entries_are_one_line_config_errors(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_relay_config([entry(**changes)], Path('.'), 'impair.yaml')
    assert str(err.value).startswith('impair.yaml entry 0 (')
    assert message in str(err.value) and '\n' not in str(err.value)


@pytest.mark.parametrize('data, message', [
    ({'uplink': []}, 'must be a non-empty YAML list of topic entries'),
    ([], 'must be a non-empty YAML list of topic entries'),
    ([entry(), entry(in_topic='/other')], "topic '/cmd_vel' is used twice (as out_topic and as out_topic)"),
    ([entry(), entry(in_topic='/cmd_vel', out_topic='/x')], "topic '/cmd_vel' is used twice"),
])
def test_bad_files_are_one_line_config_errors(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace('(', r'\(').replace(')', r'\)')):
        parse_relay_config(data, Path('.'))


def test_a_missing_key_is_named() -> None:
    data = entry()
    del data['type']
    with pytest.raises(ConfigError, match=r"entry 0 \(/cmd_vel_raw\): unknown keys \[\], missing keys \['type'\]"):
        parse_relay_config([data], Path('.'))


def test_resolve_type_imports_the_message_class() -> None:
    from geometry_msgs.msg import Twist
    from sensor_msgs.msg import LaserScan
    assert resolve_type('geometry_msgs/msg/Twist') is Twist
    assert resolve_type('sensor_msgs/LaserScan') is LaserScan
    assert normalise_type('std_msgs/UInt8MultiArray') == 'std_msgs/msg/UInt8MultiArray'


@pytest.mark.parametrize('name, message', [
    ('geometry_msgs/msg/Twst', "unknown message type 'geometry_msgs/msg/Twst': package 'geometry_msgs' has no "
                               "message 'Twst'"),
    ('nosuch_msgs/msg/Thing', "unknown message type 'nosuch_msgs/msg/Thing': no message package 'nosuch_msgs' is "
                              "installed"),
])
def test_unknown_types_are_one_line_errors(name: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_type(name)
    assert str(err.value) == message


def test_load_reports_an_unknown_type_with_file_and_entry(tmp_path: Path) -> None:
    path = tmp_path / 'bad.yaml'
    path.write_text('- {in_topic: /a, out_topic: /b, type: geometry_msgs/msg/Twst, direction: uplink, '
                    'profile: sim_clean}\n')
    with pytest.raises(ConfigError) as err:
        load_relay_config(path)
    assert str(err.value) == (f"{path} entry 0 (/a): unknown message type 'geometry_msgs/msg/Twst': package "
                              f"'geometry_msgs' has no message 'Twst'")


@pytest.mark.parametrize('text, message', [(None, 'cannot read relay config'), ('- [unclosed', 'is not valid YAML')])
def test_unreadable_files_are_one_line_errors(tmp_path: Path, text: str | None, message: str) -> None:
    path = tmp_path / 'relay.yaml'
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_relay_config(path)
    assert '\n' not in str(err.value)


@pytest.mark.parametrize('offered, expected', [
    ([('reliable', 'volatile')], QosConfig('reliable', 'volatile', 10)),
    ([('reliable', 'transient_local')], QosConfig('reliable', 'transient_local', 10)),
    ([('best_effort', 'volatile')], QosConfig('best_effort', 'volatile', 10)),
    ([('reliable', 'transient_local'), ('best_effort', 'volatile')], QosConfig('best_effort', 'volatile', 10)),
])
def test_mirror_qos_matches_every_publisher(offered: list[tuple[str, str]], expected: QosConfig) -> None:
    assert mirror_qos(offered) == expected


def test_parse_qos_fills_missing_keys_from_the_defaults() -> None:
    assert parse_qos({'depth': 3}, QosConfig('reliable', 'volatile', 1)) == QosConfig('reliable', 'volatile', 3)


def test_check_types_names_the_mismatched_endpoint() -> None:
    good = Endpoint('/cmd_vel', '/teleop', 'publisher', 'geometry_msgs/msg/Twist')
    bad = Endpoint('/cmd_vel', '/base', 'subscription', 'geometry_msgs/msg/TwistStamped')
    check_types('geometry_msgs/msg/Twist', [good])
    with pytest.raises(ConfigError) as err:
        check_types('geometry_msgs/msg/Twist', [good, bad])
    assert str(err.value) == ('topic /cmd_vel: subscription of node /base has type geometry_msgs/msg/TwistStamped, '
                              'but the relay config says geometry_msgs/msg/Twist')


def test_check_types_before_discovery_names_the_node() -> None:
    unnamed = Endpoint('/scan', '', 'publisher', 'sensor_msgs/msg/PointCloud2')
    with pytest.raises(ConfigError, match=r'^topic /scan: publisher of node \(not yet named\) has type '
                                          r'sensor_msgs/msg/PointCloud2, but the relay config says '):
        check_types('sensor_msgs/msg/LaserScan', [unnamed])
