"""ros.input_rows: the node's input table binds each row of INPUTS to its topic, message class, QoS key and the
runtime's handler, per camera by transport; a message handed to a row reaches the runtime."""

from __future__ import annotations

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

import numpy as np
from core_helpers import tiny_checkpoint
from nav_msgs.msg import Odometry
from node_helpers import rgb_image_msg
from scripted_engine import ScriptedEngine
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import String

from wam_diff2_ros.ros.conversions import ns_to_stamp
from wam_diff2_ros.ros.input_rows import input_names, input_table, receive
from wam_diff2_ros.ros.inputs import INPUTS, QOS_INPUTS
from wam_diff2_ros.ros.params import NodeConfig
from wam_diff2_ros.ros.runtime import PlannerRuntime

TEMPLATE_2 = (
    "Front: <image>\nLeft: <image>\nThe navigation information is: {command}\n"
    "The current velocity is: ({vx},{vy}) and current accelerate is: ({ax},{ay})\nPlan 8 waypoints."
)


def runtime() -> PlannerRuntime:
    config = NodeConfig.from_parameters(
        {
            "model.path": str(tiny_checkpoint()),
            "cameras.names": ["front", "left"],
            "cameras.transports": ["raw", "compressed"],
            "prompt.template": TEMPLATE_2,
        }
    )
    return PlannerRuntime(config, ScriptedEngine(), lambda: 0)


def test_rows_follow_the_table() -> None:
    planner = runtime()
    rows = input_table(planner.config, planner)
    keys = [(row.role, row.index, row.topic, row.msg_type, row.qos_key) for row in rows]
    assert keys[:4] == [
        ("image", 0, "~/input/image_0", Image, "image"),
        ("camera_info", 0, "~/input/camera_info_0", CameraInfo, "camera_info"),
        ("image", 1, "~/input/image_1", CompressedImage, "image"),  # by cameras.transports
        ("camera_info", 1, "~/input/camera_info_1", CameraInfo, "camera_info"),
    ]
    singles = {row.role: row for row in rows if row.index is None}
    assert singles["odometry"].msg_type is Odometry and singles["command"].msg_type is String
    assert singles["command"].qos_key == "command" and singles["driving_command"].qos_key == "command"
    if planner.msgs is not None:  # this package's own message: only where it is built
        assert singles["driving_command"].msg_type is planner.msgs.DrivingCommand
    assert {row.role for row in rows} <= {spec.role for spec in INPUTS}
    assert {row.qos_key for row in rows} <= set(QOS_INPUTS) and set(planner.config.qos) == set(QOS_INPUTS)
    assert input_names(rows)[:4] == [
        "image_0 (front)",
        "camera_info_0 (front)",
        "image_1 (left)",
        "camera_info_1 (left)",
    ]


def test_a_row_hands_its_message_to_the_runtime() -> None:
    planner = runtime()
    rows = {(row.role, row.index): row for row in input_table(planner.config, planner)}
    frame = rgb_image_msg(np.zeros((24, 32, 3), np.uint8), ns_to_stamp(5))
    assert receive(rows[("image", 0)], frame, 5) is None
    problem = receive(rows[("command", None)], String(data="sideways"), 6)
    assert problem is not None and problem.input == "command"
    wrong = receive(rows[("image", 1)], frame, 7)  # a raw image on the compressed camera's row
    assert wrong is not None and wrong.input == "image_1 (left)"
