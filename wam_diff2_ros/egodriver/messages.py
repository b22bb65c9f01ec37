"""A session's observations as the node's input messages (what the runtime's input table takes).

Times: the contract's microseconds become the node's nanoseconds shifted by :data:`CLOCK_OFFSET_NS`, so that a
runtime whose clock starts at 0 (the fake loop's does) never gives a zero stamp, which the node refuses as an
unstamped message. Frames: the egomotion's poses are ``local → rig`` (the odometry's ``local`` frame, child
``base_link`` = the rig); dynamic states are in the rig frame, as the node's twist and acceleration are.
"""

from __future__ import annotations

import math
from typing import Any

from wam_diff2_ros.core.image_headers import JPEG_MAGIC, PNG_MAGIC
from wam_diff2_ros.ros.conversions import ns_to_stamp

CLOCK_OFFSET_NS = 1_000_000_000  # 1 s
LOCAL_FRAME = "local"
RIG_FRAME = "base_link"


def stamp_ns(time_us: int) -> int:
    """The node's time (ns) of the contract's ``time_us``."""
    return int(time_us) * 1000 + CLOCK_OFFSET_NS


def time_us(stamp: int) -> int:
    """The contract's time (µs) of the node's ``stamp`` (ns)."""
    return (int(stamp) - CLOCK_OFFSET_NS) // 1000


def odometry(stamp: int, position: Any, quat_xyzw: Any, state: Any) -> Any:
    """``nav_msgs/Odometry`` of one egomotion pose (``local → rig``) and its rig-frame dynamic state."""
    from nav_msgs.msg import Odometry

    msg = Odometry()
    msg.header.stamp = ns_to_stamp(stamp)
    msg.header.frame_id = LOCAL_FRAME
    msg.child_frame_id = RIG_FRAME
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    p.x, p.y, p.z = (float(v) for v in position)
    q.x, q.y, q.z, q.w = (float(v) for v in quat_xyzw)
    msg.twist.twist.linear.x = float(state.linear_velocity.x)
    msg.twist.twist.linear.y = float(state.linear_velocity.y)
    msg.twist.twist.linear.z = float(state.linear_velocity.z)
    msg.twist.twist.angular.z = float(state.angular_velocity.z)
    return msg


def acceleration(stamp: int, state: Any) -> Any | None:
    """``geometry_msgs/AccelWithCovarianceStamped`` of a dynamic state's rig-frame linear acceleration; None when
    the state carries none (then the runtime derives it from the odometry, ``acceleration.source: auto``)."""
    from geometry_msgs.msg import AccelWithCovarianceStamped

    if not state.HasField("linear_acceleration"):
        return None
    msg = AccelWithCovarianceStamped()
    msg.header.stamp = ns_to_stamp(stamp)
    msg.header.frame_id = RIG_FRAME
    msg.accel.accel.linear.x = float(state.linear_acceleration.x)
    msg.accel.accel.linear.y = float(state.linear_acceleration.y)
    msg.accel.accel.linear.z = float(state.linear_acceleration.z)
    return msg


def camera_info(stamp: int, camera: Any) -> tuple[Any, str]:
    """``sensor_msgs/CameraInfo`` of a declared camera (``AvailableCamera``) and a note: a pinhole camera's
    intrinsics; another model (f-theta, fisheye) gives an uncalibrated CameraInfo (all-zero ``k``: the runtime uses
    ``cameras.fallback_hfov_deg``) and says so in the note."""
    from sensor_msgs.msg import CameraInfo

    spec = camera.intrinsics
    info = CameraInfo()
    info.header.stamp = ns_to_stamp(stamp)
    info.header.frame_id = f"{camera.logical_id}_optical"
    info.width, info.height = int(spec.resolution_w), int(spec.resolution_h)
    info.distortion_model = "plumb_bob"
    info.d = [0.0] * 5
    info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    model = spec.WhichOneof("camera_param")
    if model != "opencv_pinhole_param":
        info.k = [0.0] * 9
        info.p = [0.0] * 12
        return info, f"camera {camera.logical_id!r} is {model or 'without a model'}, not a pinhole: fallback FOV"
    pinhole = spec.opencv_pinhole_param
    fx, fy = float(pinhole.focal_length_x), float(pinhole.focal_length_y)
    cx, cy = float(pinhole.principal_point_x), float(pinhole.principal_point_y)
    info.k = [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]
    info.p = [fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    distortion = [*pinhole.radial_coeffs, *pinhole.tangential_coeffs, *pinhole.thin_prism_coeffs]
    note = ""
    if any(v != 0.0 and math.isfinite(v) for v in distortion):
        note = f"camera {camera.logical_id!r} has lens distortion the policy does not undo (rectify it)"
    return info, note


def compressed_image(stamp: int, logical_id: str, data: bytes) -> Any:
    """``sensor_msgs/CompressedImage`` of a frame's encoded bytes (format from the bytes; the runtime checks them)."""
    from sensor_msgs.msg import CompressedImage

    msg = CompressedImage()
    msg.header.stamp = ns_to_stamp(stamp)
    msg.header.frame_id = f"{logical_id}_optical"
    head = bytes(data[:8])
    msg.format = "png" if head.startswith(PNG_MAGIC) else "jpeg" if head.startswith(JPEG_MAGIC) else "unknown"
    msg.data = bytes(data)
    return msg


def command(text: str) -> Any:
    """``std_msgs/String`` navigation command."""
    from std_msgs.msg import String

    return String(data=text)
