"""ROS 2 layer: the lifecycle node, message conversion, QoS and diagnostics."""
