"""Mode 3, edge sim: the env node on the edge (a Raspberry Pi), the policy node on a desktop, over DDS.

    ros2 launch calf_bringup edge_sim.launch.py role:=edge [network:=PROFILE] domain_id:=N    # on the Pi
    ros2 launch calf_bringup edge_sim.launch.py role:=desktop policy:=DIR [network:=PROFILE] domain_id:=N

Give both sides the same network: a profile other than sim_clean adds the shim on the edge, and
the policy then reads the shim's desktop topics. ``role:=all`` starts both sides here. The graph is
described once, in ``calf_bringup.graph``, from the run options of ``calf_bringup.run_options``;
``calf run edge_sim --role ...`` starts the same nodes.

``placement:=flat_edge`` runs the policy on the Pi beside the env; ``placement:=hierarchical policy:=DIR``
(from ``calf train-hierarchy``) runs the arbiter and the edge sub-policies on the Pi and the
desktop sub-policies on the desktop: pass the same DIR on both machines.
"""

from __future__ import annotations

from calf_bringup.launch_support import launch_description
from launch import LaunchDescription

MODE = 'edge_sim'


def generate_launch_description() -> LaunchDescription:
    return launch_description(MODE)
