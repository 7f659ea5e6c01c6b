"""Mode 2, sim + simulated network: env node <-> shim <-> policy node, on one machine.

    ros2 launch calf_bringup sim_net.launch.py policy:=DIR network:=wifi_normal [domain_id:=N]

The graph is described once, in ``calf_bringup.graph``; ``calf run sim_net`` starts the same nodes
where the launch system is not installed.
"""

from __future__ import annotations

from calf_bringup.launch_support import launch_description
from launch import LaunchDescription

MODE = 'sim_net'


def generate_launch_description() -> LaunchDescription:
    return launch_description(MODE)
