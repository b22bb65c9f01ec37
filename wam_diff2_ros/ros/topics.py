"""The node's topic names (private, remappable: ``~`` is the node's namespace and name), one table.

The node subscribes and publishes with these names (``WamDiff2Node``; an input's name comes from its row of the
input table, :mod:`.inputs`); the replay writes its output bag under the same names below the default node name
(:func:`absolute`). No ROS import: the replay's topic handling uses them without loading rclpy.

The topics (``<n>`` = camera index in ``cameras.names``):

======================================  ==================================================
``~/input/image_<n>``                   ``sensor_msgs/Image`` or ``sensor_msgs/CompressedImage``
                                        (``cameras.transports``)
``~/input/camera_info_<n>``             ``sensor_msgs/CameraInfo`` (optional)
``~/input/command``                     ``std_msgs/String`` left/straight/right/unknown
``~/input/driving_command``             ``wam_diff2_ros/DrivingCommand`` (same role; ROS allows one
                                        type per topic name, so it has its own name)
``~/input/odometry``                    ``nav_msgs/Odometry`` (twist in the child frame)
``~/input/acceleration``                ``geometry_msgs/AccelWithCovarianceStamped`` (optional)
``~/input/question``                    ``std_msgs/String`` (VQA)
``~/output/path``                       ``nav_msgs/Path`` in ``planning.frame_id`` (base_link)
``~/output/trajectory``                 ``wam_diff2_ros/PlannedTrajectory`` (same frame)
``~/output/path_fixed``                 ``nav_msgs/Path`` in the odometry's frame (odom/map): the plan
                                        transformed by the ego pose at the image stamp
``~/output/trajectory_fixed``           ``wam_diff2_ros/PlannedTrajectory`` in the odometry's frame
``~/output/autoware/trajectory``        ``autoware_planning_msgs/Trajectory`` in the odometry's frame, with
                                        ``~/output/path`` (``autoware.outputs``; docs/autoware.md)
``~/output/autoware/candidates``        ``autoware_internal_planning_msgs/CandidateTrajectories`` (likewise)
``~/input/turn_indicators``             ``autoware_vehicle_msgs/TurnIndicatorsCommand`` (``command.source``
                                        ``turn_indicators``)
``~/input/route``                       ``nav_msgs/Path``, the route's centre line (``command.source`` ``route``)
``~/output/markers``                    ``visualization_msgs/MarkerArray`` (path and detections)
``~/output/detections``                 ``wam_diff2_ros/DetectionArray``
``~/output/detections_2d``              ``vision_msgs/Detection2DArray`` (where vision_msgs is installed)
``~/output/answer``                     ``std_msgs/String``
``~/debug/image``                       ``sensor_msgs/Image`` (rgb8)
``/diagnostics``                        ``diagnostic_msgs/DiagnosticArray``
======================================  ==================================================
"""

from __future__ import annotations

QUESTION_TOPIC = "~/input/question"

#: output name → topic (the names :class:`~.runtime.PlanCycle` / ``DetectionCycle`` ``outputs()`` use).
OUTPUT_TOPICS: dict[str, str] = {
    "path": "~/output/path",
    "path_fixed": "~/output/path_fixed",
    "trajectory": "~/output/trajectory",
    "trajectory_fixed": "~/output/trajectory_fixed",
    "autoware_trajectory": "~/output/autoware/trajectory",
    "autoware_candidates": "~/output/autoware/candidates",
    "markers": "~/output/markers",
    "detections": "~/output/detections",
    "detections_2d": "~/output/detections_2d",
    "answer": "~/output/answer",
    "debug_image": "~/debug/image",
}


def absolute(topic: str, node: str) -> str:
    """``topic`` for the node whose fully qualified name is ``node`` (``~/output/path``, ``/wam_diff2`` →
    ``/wam_diff2/output/path``)."""
    return f"{node.rstrip('/')}/{topic.removeprefix('~/')}" if topic.startswith("~/") else topic
