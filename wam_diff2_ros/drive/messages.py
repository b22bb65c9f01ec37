"""The simulated sensors as the node's input messages (what a real car's drivers would publish)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wam_diff2_ros.drive.vehicle import VehicleState
from wam_diff2_ros.sim.render import CameraModel
from wam_diff2_ros.sim.road import BASE_FRAME, CAMERA_FRAME, ODOM_FRAME


def odometry(stamp_ns: int, state: VehicleState, yaw_rate: float) -> Any:
    """``nav_msgs/Odometry`` of the rear axle in ``odom`` (the episode's world frame)."""
    from nav_msgs.msg import Odometry

    from wam_diff2_ros.ros.conversions import ns_to_stamp

    msg = Odometry()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = ODOM_FRAME
    msg.child_frame_id = BASE_FRAME
    msg.pose.pose.position.x = float(state.x)
    msg.pose.pose.position.y = float(state.y)
    msg.pose.pose.orientation.z = math.sin(state.yaw / 2)
    msg.pose.pose.orientation.w = math.cos(state.yaw / 2)
    msg.twist.twist.linear.x = float(state.v)
    msg.twist.twist.angular.z = float(yaw_rate)
    return msg


def acceleration(stamp_ns: int, state: VehicleState, yaw_rate: float) -> Any:
    """``geometry_msgs/AccelWithCovarianceStamped`` in base_link: longitudinal and lateral (v · yaw rate)."""
    from geometry_msgs.msg import AccelWithCovarianceStamped

    from wam_diff2_ros.ros.conversions import ns_to_stamp

    msg = AccelWithCovarianceStamped()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = BASE_FRAME
    msg.accel.accel.linear.x = float(state.a)
    msg.accel.accel.linear.y = float(state.v * yaw_rate)
    return msg


def camera_info(stamp_ns: int, cam: CameraModel) -> Any:
    """``sensor_msgs/CameraInfo`` of the front camera (pinhole, no distortion)."""
    from sensor_msgs.msg import CameraInfo

    from wam_diff2_ros.ros.conversions import ns_to_stamp

    info = CameraInfo()
    info.header.stamp = ns_to_stamp(stamp_ns)
    info.header.frame_id = CAMERA_FRAME
    info.width, info.height = cam.width, cam.height
    info.distortion_model = "plumb_bob"
    info.d = [0.0] * 5
    info.k = cam.k
    info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    info.p = cam.p
    return info


def image(stamp_ns: int, rgb: np.ndarray) -> Any:
    """``sensor_msgs/Image`` (rgb8) of the front camera."""
    from wam_diff2_ros.ros.conversions import rgb_to_image_msg

    return rgb_to_image_msg(rgb, stamp_ns, CAMERA_FRAME)


def jpeg(stamp_ns: int, rgb: np.ndarray, quality: int = 80) -> Any:
    """``sensor_msgs/CompressedImage`` (JPEG) of the front camera, for the episode's bag."""
    import cv2
    from sensor_msgs.msg import CompressedImage

    from wam_diff2_ros.ros.conversions import ns_to_stamp

    ok, data = cv2.imencode(".jpg", np.ascontiguousarray(rgb[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("OpenCV could not encode a JPEG")
    msg = CompressedImage()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = CAMERA_FRAME
    msg.format = "jpeg"
    msg.data = data.tobytes()
    return msg


def command(text: str) -> Any:
    """``std_msgs/String`` navigation command."""
    from std_msgs.msg import String

    return String(data=text)
