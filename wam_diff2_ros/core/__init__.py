"""ROS-free core: checkpoint loading, block-diffusion decoding, prompts and parsers.

Nothing below this package imports rclpy or any ROS message package.
"""
