"""Mode 1, local sim: env node and policy node connected directly, zero added latency (the baseline).

    ros2 launch calf_bringup local_sim.launch.py policy:=DIR [domain_id:=N]

The graph is described once, in ``calf_bringup.graph``; ``calf run local_sim`` starts the same nodes
where the launch system is not installed. ``network`` must stay sim_clean here.
"""

from __future__ import annotations

from calf_bringup.launch_support import launch_description
from launch import LaunchDescription

MODE = 'local_sim'


def generate_launch_description() -> LaunchDescription:
    return launch_description(MODE)
