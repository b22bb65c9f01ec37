"""The node's topic names (private, remappable: ``~`` is the node's namespace and name), one table.

The node subscribes and publishes with these names (:mod:`.inputs`, ``WamDiff2Node``); the replay writes its
output bag under the same names below the default node name (:func:`absolute`). No ROS import: the replay's
topic handling uses them without loading rclpy.
"""

from __future__ import annotations

ODOMETRY_TOPIC = "~/input/odometry"
ACCELERATION_TOPIC = "~/input/acceleration"
COMMAND_TOPIC = "~/input/command"
DRIVING_COMMAND_TOPIC = "~/input/driving_command"  # same role as command; ROS allows one type per topic name
QUESTION_TOPIC = "~/input/question"

#: output name → topic (the names :class:`~.runtime.PlanCycle` / ``DetectionCycle`` ``outputs()`` use).
OUTPUT_TOPICS: dict[str, str] = {
    "path": "~/output/path",
    "path_fixed": "~/output/path_fixed",
    "trajectory": "~/output/trajectory",
    "trajectory_fixed": "~/output/trajectory_fixed",
    "markers": "~/output/markers",
    "detections": "~/output/detections",
    "detections_2d": "~/output/detections_2d",
    "answer": "~/output/answer",
    "debug_image": "~/debug/image",
}


def image_topic(index: int) -> str:
    """Camera ``index``'s image topic."""
    return f"~/input/image_{index}"


def camera_info_topic(index: int) -> str:
    """Camera ``index``'s CameraInfo topic."""
    return f"~/input/camera_info_{index}"


def absolute(topic: str, node: str) -> str:
    """``topic`` for the node whose fully qualified name is ``node`` (``~/output/path``, ``/wam_diff2`` →
    ``/wam_diff2/output/path``)."""
    return f"{node.rstrip('/')}/{topic.removeprefix('~/')}" if topic.startswith("~/") else topic
