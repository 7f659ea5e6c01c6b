"""CALF's ROS 2 helpers: node start-up, parameters, QoS, and message conversions."""
