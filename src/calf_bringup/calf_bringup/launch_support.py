"""Launch actions from graph descriptions: the one body of every launch file in ``launch/``.

Only the launch files import this module, so it may import ``launch`` and ``launch_ros``, which
exist on a full ROS 2 install only.
"""
from __future__ import annotations

from collections.abc import Callable

from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from calf_bringup.graph import NodeSpec
from launch import LaunchContext, LaunchDescription

LaunchArguments = tuple[tuple[str, str, str], ...]


def launch_description(arguments: LaunchArguments,
                       specs_for: Callable[[dict[str, str]], list[NodeSpec]]) -> LaunchDescription:
    """Declare ``arguments``; at launch, start ``specs_for(values)``, after ROS_DOMAIN_ID when one is given."""

    def nodes(context: LaunchContext) -> list:
        values = {name: LaunchConfiguration(name).perform(context) for name, _, _ in arguments}
        domain = values.get('domain_id')
        actions: list = [SetEnvironmentVariable('ROS_DOMAIN_ID', domain)] if domain else []
        return actions + [Node(package=spec.package, executable=spec.executable, name=spec.name,
                               namespace=spec.namespace, parameters=[spec.parameters], remappings=spec.remappings,
                               additional_env=spec.additional_env, output='screen') for spec in specs_for(values)]

    declared = [DeclareLaunchArgument(name, default_value=default, description=text)
                for name, default, text in arguments]
    return LaunchDescription([*declared, OpaqueFunction(function=nodes)])
