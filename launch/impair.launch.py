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

from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from calf_bringup.graph import IMPAIR_LAUNCH_ARGUMENTS, impair_graph


def _graph(context: LaunchContext) -> list:
    """The generic shim for the given config, after ROS_DOMAIN_ID when one is given."""
    value = {name: LaunchConfiguration(name).perform(context) for name, _, _ in IMPAIR_LAUNCH_ARGUMENTS}
    specs = impair_graph(value['config'], int(value['seed']), float(value['time_scale']), value['discovery'] or None)
    actions: list = [SetEnvironmentVariable('ROS_DOMAIN_ID', value['domain_id'])] if value['domain_id'] else []
    return actions + [Node(package=spec.package, executable=spec.executable, name=spec.name,
                           namespace=spec.namespace, parameters=[spec.parameters], remappings=spec.remappings,
                           additional_env=spec.additional_env, output='screen') for spec in specs]


def generate_launch_description() -> LaunchDescription:
    arguments = [DeclareLaunchArgument(name, default_value=default, description=text)
                 for name, default, text in IMPAIR_LAUNCH_ARGUMENTS]
    return LaunchDescription([*arguments, OpaqueFunction(function=_graph)])
