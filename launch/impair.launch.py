"""Impair topics of an existing robot stack: the generic shim between its nodes, by topic remapping.

    ros2 launch calf_bringup impair.launch.py config:=/path/to/impair_cmd_vel.yaml [seed:=N] [domain_id:=N]

The relay config (``calf_shim.topic_relay_config``) lists ``in_topic -> out_topic`` per topic. Put
the shim in between by remapping the existing sender onto the ``in_topic``, so that the existing
receivers keep their topic and now get it from the shim. For ``/cmd_vel``
(in_topic ``/cmd_vel_raw``, out_topic ``/cmd_vel``):

    ros2 run teleop_twist_keyboard teleop_twist_keyboard --ros-args -r cmd_vel:=/cmd_vel_raw

or, in the robot's own launch file, ``remappings=[('cmd_vel', '/cmd_vel_raw')]`` on the node that
publishes velocity commands. The robot driver keeps subscribing to ``/cmd_vel``. LinkStats per topic
appear on ``/calf/shim/link_stats``. ``calf run impair --config FILE`` starts the same node where the
launch system is not installed.
"""

from __future__ import annotations

from calf_bringup.launch_support import launch_description
from launch import LaunchDescription

MODE = 'impair'


def generate_launch_description() -> LaunchDescription:
    return launch_description(MODE)
