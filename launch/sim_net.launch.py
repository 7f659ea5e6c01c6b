"""Mode 2, sim + simulated network: env node <-> shim <-> policy node, on one machine.

    ros2 launch calf_bringup sim_net.launch.py policy:=DIR network:=wifi_normal [domain_id:=N]

The graph is described once, in ``calf_bringup.graph``; ``calf run sim_net`` starts the same nodes
where the launch system is not installed.
"""
from __future__ import annotations

from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from calf_bringup.graph import LAUNCH_ARGUMENTS, build_graph

MODE = 'sim_net'


def _graph(context: LaunchContext) -> list:
    """The nodes of MODE for the given arguments, after ROS_DOMAIN_ID when one is given."""
    value = {name: LaunchConfiguration(name).perform(context) for name, _, _ in LAUNCH_ARGUMENTS}
    specs = build_graph(MODE, value['role'], value['network'], value['policy'] or None, value['env'],
                        int(value['seed']), float(value['time_scale']), int(value['episodes']),
                        value['discovery'] or None, graph=value['graph'])
    actions: list = [SetEnvironmentVariable('ROS_DOMAIN_ID', value['domain_id'])] if value['domain_id'] else []
    return actions + [Node(package=spec.package, executable=spec.executable, name=spec.name,
                           namespace=spec.namespace, parameters=[spec.parameters], remappings=spec.remappings,
                           additional_env=spec.additional_env, output='screen') for spec in specs]


def generate_launch_description() -> LaunchDescription:
    arguments = [DeclareLaunchArgument(name, default_value=default, description=text)
                 for name, default, text in LAUNCH_ARGUMENTS]
    return LaunchDescription([*arguments, OpaqueFunction(function=_graph)])
