"""The config files calf_bringup ships parse as the README shows them."""
from __future__ import annotations

from pathlib import Path

from calf_core.traces import Direction
from calf_shim.topic_relay_config import load_relay_config

CONFIG = Path(__file__).resolve().parents[1] / 'config'


def test_the_example_config_relays_cmd_vel_and_scan() -> None:
    cmd_vel, scan = load_relay_config(CONFIG / 'impair_cmd_vel.yaml')
    assert (cmd_vel.in_topic, cmd_vel.out_topic, cmd_vel.type_name, cmd_vel.direction, cmd_vel.profile.name,
            cmd_vel.qos) == ('/cmd_vel_raw', '/cmd_vel', 'geometry_msgs/msg/Twist', Direction.DOWNLINK,
                             'wifi_degraded', None)
    assert (scan.type_name, scan.direction, scan.profile.name) == ('sensor_msgs/msg/LaserScan', Direction.UPLINK,
                                                                   'wifi_normal')
