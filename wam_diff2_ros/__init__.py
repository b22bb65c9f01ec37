"""wam_diff2_ros: WAM-Diff2 block-diffusion driving model as a ROS 2 node, CLI and replay tools."""

__version__ = "0.1.0"

from ._interfaces import extend_package_path as _extend_package_path

_extend_package_path(__path__)  # generated ROS 2 messages of the pip route; no-op when absent
