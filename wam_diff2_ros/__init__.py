"""wam_diff2_ros: WAM-Diff2 block-diffusion driving model as a ROS 2 node, CLI and replay tools."""

__version__ = "0.1.0"
