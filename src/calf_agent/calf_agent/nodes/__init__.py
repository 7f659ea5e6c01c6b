"""The ROS 2 nodes of a policy: the policy node, the adapter policy node and the arbiter of a hierarchy."""
