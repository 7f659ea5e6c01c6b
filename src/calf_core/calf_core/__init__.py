"""The pure core of CALF, with no ROS dependency: timing rules, tasks, network models and profiles, traces,
and the virtual-time NetworkedEnv."""
