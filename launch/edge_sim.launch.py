"""Mode 3, edge sim: the env node on the edge (a Raspberry Pi), the policy node on a desktop, over DDS.

    ros2 launch calf_bringup edge_sim.launch.py role:=edge [network:=PROFILE] domain_id:=N    # on the Pi
    ros2 launch calf_bringup edge_sim.launch.py role:=desktop policy:=DIR [network:=PROFILE] domain_id:=N

Give both sides the same network: a profile other than sim_clean adds the shim on the edge, and
the policy then reads the shim's desktop topics. ``role:=all`` starts both sides here. The graph is
described once, in ``calf_bringup.graph``; ``calf run edge_sim --role ...`` starts the same nodes.

``graph:=flat_edge`` runs the policy on the Pi beside the env; ``graph:=hierarchical policy:=DIR``
(from ``calf train-hierarchy``) runs the arbiter and the edge sub-policies on the Pi and the
desktop sub-policies on the desktop: pass the same DIR on both machines.
"""
from __future__ import annotations

from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from calf_bringup.graph import LAUNCH_ARGUMENTS, build_graph

MODE = 'edge_sim'


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
