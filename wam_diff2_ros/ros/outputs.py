"""Results of the core pipeline → output messages (plain functions, no node needed).

* :func:`plan_path` → ``nav_msgs/Path`` in base_link: header stamp = the front image
  stamp (never now()); pose ``i`` stamped ``stamp + t_i`` with ``t_i = dt·(i+1)`` (0.5 s steps), z = 0,
  orientation = the parsed yaw (from consecutive points). With an ``EgoPose`` (the ego at the image
  stamp in the odometry's frame) the same plan in that frame: each waypoint transformed by the pose,
  z = the ego's z, header frame = the pose's frame;
* :func:`plan_trajectory` → this package's ``PlannedTrajectory`` (also for invalid answers; with a pose,
  the points in the pose's frame);
* :func:`plan_markers` → ``MarkerArray``: ns ``wam_diff2/path`` id 0 (LINE_STRIP from the ego origin
  through the waypoints) and ns ``wam_diff2/waypoints`` ids 0..n-1 (spheres), lifetime ≈ one period;
  an invalid plan gives DELETE markers with the same ns/ids, so no old path lingers;
* :func:`detection_array` / :func:`detection_markers` / :func:`detection_2d_array` for detections,
  markers in the camera's optical frame on a plane ``depth_m`` in front of the camera: box outline ns
  ``wam_diff2/detections/<camera>`` and label ns ``wam_diff2/detection_labels/<camera>``, id = index;
  ids that were used last time and not now get DELETE markers.
"""

from __future__ import annotations

import colorsys
import functools
import math
import zlib
from collections.abc import Sequence
from typing import Any

from geometry_msgs.msg import Point, Pose, PoseStamped, Quaternion
from nav_msgs.msg import Path
from sensor_msgs.msg import Image
from std_msgs.msg import ColorRGBA, String
from visualization_msgs.msg import Marker, MarkerArray

from wam_diff2_ros.core.frames import EgoPose, transform_waypoints
from wam_diff2_ros.core.parsing import Waypoint
from wam_diff2_ros.core.planning import AnswerResult, DetectionResult, PlanResult, StageTiming
from wam_diff2_ros.core.units import NS_PER_S

from .conversions import ns_to_duration, ns_to_stamp

PATH_NS = "wam_diff2/path"
WAYPOINTS_NS = "wam_diff2/waypoints"
DETECTIONS_NS = "wam_diff2/detections/"
DETECTION_LABELS_NS = "wam_diff2/detection_labels/"


@functools.cache
def own_messages() -> tuple[Any | None, str]:
    """This package's generated message module and "" , or (None, why it is missing)."""
    import wam_diff2_ros
    from wam_diff2_ros import _interfaces

    _interfaces.extend_package_path(wam_diff2_ros.__path__)
    try:
        from wam_diff2_ros import msg
    except ImportError as exc:
        return None, (
            f"wam_diff2_ros.msg is not importable ({exc}); build the interfaces "
            "(`wam-diff2-build-interfaces`, or colcon build)"
        )
    return msg, ""


@functools.cache
def vision_messages() -> Any | None:
    """``vision_msgs.msg`` when installed, else None."""
    try:
        from vision_msgs import msg
    except ImportError:
        return None
    return msg


def output_types(msgs: Any, vision_msgs: Any, debug_image: bool, autoware_msgs: Any = None) -> dict[str, type]:
    """The node's outputs by name (:data:`~.topics.OUTPUT_TOPICS`) → message type: those of this package's
    messages only where they import (``msgs``), ``detections_2d`` only with ``vision_msgs``, the debug image only
    when enabled, the Autoware outputs with ``autoware_msgs`` (``autoware.outputs``)."""
    types: dict[str, type] = {"path": Path, "path_fixed": Path, "markers": MarkerArray, "answer": String}
    if debug_image:
        types["debug_image"] = Image
    if msgs is not None:
        types.update(
            trajectory=msgs.PlannedTrajectory, trajectory_fixed=msgs.PlannedTrajectory, detections=msgs.DetectionArray
        )
    if vision_msgs is not None:
        types["detections_2d"] = vision_msgs.Detection2DArray
    if autoware_msgs is not None:
        types.update(
            autoware_trajectory=autoware_msgs.Trajectory, autoware_candidates=autoware_msgs.CandidateTrajectories
        )
    return types


def yaw_to_quaternion(yaw: float) -> Quaternion:
    """A rotation of ``yaw`` radians about z."""
    return Quaternion(x=0.0, y=0.0, z=math.sin(yaw / 2.0), w=math.cos(yaw / 2.0))


def _pose(x: float, y: float, yaw: float, z: float = 0.0) -> Pose:
    pose = Pose()
    pose.position.x, pose.position.y, pose.position.z = float(x), float(y), float(z)
    pose.orientation = yaw_to_quaternion(yaw)
    return pose


def _placed(result: PlanResult, frame_id: str, pose: EgoPose | None) -> tuple[str, tuple[Waypoint, ...], float]:
    """Frame, waypoints and z of a plan: as answered (base_link), or moved by ``pose`` into its frame."""
    if pose is None:
        return frame_id, result.waypoints, 0.0
    return pose.frame_id, transform_waypoints(result.waypoints, pose), pose.z


def _offset_ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


def plan_path(result: PlanResult, frame_id: str = "base_link", pose: EgoPose | None = None) -> Path:
    """The waypoints of a valid plan as ``nav_msgs/Path`` in ``frame_id`` (base_link), or with ``pose`` in
    ``pose.frame_id`` (raises ``ValueError`` for an invalid plan)."""
    if not result.valid:
        raise ValueError(f"an invalid plan has no path ({result.reason})")
    frame_id, waypoints, z = _placed(result, frame_id, pose)
    path = Path()
    path.header.stamp = ns_to_stamp(result.stamp_ns)
    path.header.frame_id = frame_id
    for waypoint in waypoints:
        stamped = PoseStamped()
        stamped.header.stamp = ns_to_stamp(result.stamp_ns + _offset_ns(waypoint.t))
        stamped.header.frame_id = frame_id
        stamped.pose = _pose(waypoint.x, waypoint.y, waypoint.yaw, z)
        path.poses.append(stamped)
    return path


def timing_msg(timing: StageTiming, msgs: Any) -> Any:
    """``InferenceTiming`` from a :class:`StageTiming`."""
    return msgs.InferenceTiming(
        **{name: float(value) for name, value in timing.milliseconds().items()},
    )


def plan_trajectory(result: PlanResult, frame_id: str, msgs: Any, pose: EgoPose | None = None) -> Any:
    """``PlannedTrajectory``: waypoints with time_from_start, validity and reason, raw text, prompt, the
    telemetry written into the prompt, per-stage timing and denoising steps per block; with ``pose`` the
    points are in ``pose.frame_id`` (see :func:`plan_path`)."""
    frame_id, placed, z = _placed(result, frame_id, pose)
    trajectory = msgs.PlannedTrajectory()
    trajectory.header.stamp = ns_to_stamp(result.stamp_ns)
    trajectory.header.frame_id = frame_id
    trajectory.points = trajectory_points(result.waypoints, placed, z, msgs)
    trajectory.valid = bool(result.valid)
    trajectory.invalid_reason = result.reason
    trajectory.raw_text = result.raw_text
    trajectory.prompt = result.prompt
    observation = result.observation
    trajectory.navigation_command = observation.command.value
    trajectory.ego_velocity.x, trajectory.ego_velocity.y = (float(v) for v in observation.velocity)
    trajectory.ego_acceleration.x, trajectory.ego_acceleration.y = (float(a) for a in observation.acceleration)
    trajectory.timing = timing_msg(result.timing, msgs)
    trajectory.denoising_steps_per_block = [min(max(int(s), 0), 65535) for s in result.steps_per_block]
    if len(result.waypoint_confidence) == len(trajectory.points):
        trajectory.waypoint_confidence = [_unit(c) for c in result.waypoint_confidence]
    trajectory.confidence = _unit(result.confidence)
    trajectory.deadline_ms = float(result.deadline_ms)
    trajectory.deadline_met = bool(result.deadline_met)
    trajectory.early_tokens = min(max(int(result.early_tokens), 0), 65535)
    trajectory.model = result.model
    trajectory.chosen_candidate = result.chosen_candidate
    return trajectory


def trajectory_points(waypoints: Sequence[Waypoint], placed: Sequence[Waypoint], z: float, msgs: Any) -> list[Any]:
    """``TrajectoryPoint``s of ``waypoints`` (as answered, for the speeds) at their ``placed`` poses."""
    points, previous = [], (0.0, 0.0, 0.0)
    for waypoint, moved in zip(waypoints, placed, strict=True):
        point = msgs.TrajectoryPoint()
        point.time_from_start = ns_to_duration(_offset_ns(waypoint.t))
        point.pose = _pose(moved.x, moved.y, moved.yaw, z)
        dt = waypoint.t - previous[2]
        distance = math.hypot(waypoint.x - previous[0], waypoint.y - previous[1])
        point.longitudinal_velocity_mps = float(distance / dt) if dt > 0 else 0.0
        points.append(point)
        previous = (waypoint.x, waypoint.y, waypoint.t)
    return points


def _unit(value: float) -> float:
    """A confidence clipped to [0, 1] (0 for NaN)."""
    value = float(value)
    return min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0


def confidence_color(confidence: float) -> tuple[float, float, float]:
    """Red (0) through yellow (0.5) to green (1): a waypoint's colour by its confidence."""
    return colorsys.hsv_to_rgb(_unit(confidence) / 3.0, 0.9, 1.0)


def _color(r: float, g: float, b: float, a: float = 1.0) -> ColorRGBA:
    return ColorRGBA(r=float(r), g=float(g), b=float(b), a=float(a))


def label_color(label: str) -> tuple[float, float, float]:
    """A stable, saturated colour for a label (same label → same colour in markers and debug image)."""
    hue = (zlib.crc32(label.encode("utf-8")) % 360) / 360.0
    return colorsys.hsv_to_rgb(hue, 0.85, 1.0)


def _marker(ns: str, marker_id: int, frame_id: str, stamp_ns: int, lifetime_s: float) -> Marker:
    marker = Marker()
    marker.header.stamp = ns_to_stamp(stamp_ns)
    marker.header.frame_id = frame_id
    marker.ns = ns
    marker.id = int(marker_id)
    marker.pose.orientation.w = 1.0
    marker.lifetime = ns_to_duration(_offset_ns(lifetime_s))
    return marker


def _delete(ns: str, marker_id: int, frame_id: str, stamp_ns: int) -> Marker:
    marker = _marker(ns, marker_id, frame_id, stamp_ns, 0.0)
    marker.action = Marker.DELETE
    return marker


def plan_markers(
    result: PlanResult, frame_id: str, lifetime_s: float, num_waypoints: int, pose: EgoPose | None = None
) -> MarkerArray:
    """Path line strip (from the ego) + waypoint spheres for a valid plan, in ``frame_id`` or, with ``pose``,
    in its frame; DELETE markers for the same ids otherwise. Spheres are coloured by the waypoint's confidence
    (:func:`confidence_color`) when the plan has one."""
    markers = MarkerArray()
    stamp = result.stamp_ns
    frame_id, waypoints, z = _placed(result, frame_id, pose)
    origin = (pose.x, pose.y) if pose is not None else (0.0, 0.0)
    if not result.valid:
        markers.markers.append(_delete(PATH_NS, 0, frame_id, stamp))
        markers.markers.extend(_delete(WAYPOINTS_NS, i, frame_id, stamp) for i in range(num_waypoints))
        return markers
    line = _marker(PATH_NS, 0, frame_id, stamp, lifetime_s)
    line.type = Marker.LINE_STRIP
    line.action = Marker.ADD
    line.scale.x = 0.25
    line.color = _color(0.1, 0.9, 0.3, 0.9)
    line.points = [Point(x=origin[0], y=origin[1], z=z)] + [Point(x=w.x, y=w.y, z=z) for w in waypoints]
    markers.markers.append(line)
    for index, waypoint in enumerate(waypoints):
        sphere = _marker(WAYPOINTS_NS, index, frame_id, stamp, lifetime_s)
        sphere.type = Marker.SPHERE
        sphere.action = Marker.ADD
        sphere.pose.position.x, sphere.pose.position.y = float(waypoint.x), float(waypoint.y)
        sphere.pose.position.z = float(z)
        sphere.scale.x = sphere.scale.y = sphere.scale.z = 0.5
        if len(result.waypoint_confidence) == len(waypoints):
            sphere.color = _color(*confidence_color(result.waypoint_confidence[index]), 1.0)
        else:
            sphere.color = _color(1.0, 0.85, 0.1, 1.0)
        markers.markers.append(sphere)
    for index in range(len(result.waypoints), num_waypoints):
        markers.markers.append(_delete(WAYPOINTS_NS, index, frame_id, stamp))
    return markers


def detection_array(result: DetectionResult, msgs: Any, end_to_end_ms: float = 0.0) -> Any:
    """``DetectionArray`` of one camera's detections (pixel boxes, label, optional score)."""
    array = msgs.DetectionArray()
    array.header.stamp = ns_to_stamp(result.stamp_ns)
    array.header.frame_id = result.frame_id
    array.camera = result.camera
    array.image_width, array.image_height = int(result.width), int(result.height)
    for detection in result.detections:
        item = msgs.Detection()
        item.label = detection.label
        item.has_score = detection.score is not None
        item.score = float(detection.score) if detection.score is not None else 0.0
        item.x_min, item.y_min = float(detection.x_min), float(detection.y_min)
        item.x_max, item.y_max = float(detection.x_max), float(detection.y_max)
        item.camera = result.camera
        array.detections.append(item)
    array.skipped_entries = int(result.skipped)
    array.raw_text = result.raw_text
    array.timing = timing_msg(result.timing.with_end_to_end(end_to_end_ms), msgs)
    return array


def box_corners_3d(result: DetectionResult, index: int, depth_m: float) -> list[tuple[float, float, float]]:
    """The 4 corners (top-left, top-right, bottom-right, bottom-left) of detection ``index`` back-projected
    onto the plane ``z = depth_m`` of the camera's optical frame."""
    detection = result.detections[index]
    intrinsics = result.intrinsics
    pixels = [
        (detection.x_min, detection.y_min),
        (detection.x_max, detection.y_min),
        (detection.x_max, detection.y_max),
        (detection.x_min, detection.y_max),
    ]
    return [intrinsics.back_project(u, v, depth_m) for u, v in pixels]


def detection_markers(
    result: DetectionResult, depth_m: float, lifetime_s: float, previous_count: int = 0
) -> MarkerArray:
    """Box outlines (closed LINE_STRIP) and labels (TEXT_VIEW_FACING) in the optical frame at ``depth_m``;
    DELETE markers for ids ``len(detections)..previous_count-1``."""
    markers = MarkerArray()
    frame, stamp = result.frame_id, result.stamp_ns
    box_ns, label_ns = DETECTIONS_NS + result.camera, DETECTION_LABELS_NS + result.camera
    line_width = max(0.02, depth_m * 0.004)
    for index, detection in enumerate(result.detections):
        corners = box_corners_3d(result, index, depth_m)
        r, g, b = label_color(detection.label)
        box = _marker(box_ns, index, frame, stamp, lifetime_s)
        box.type = Marker.LINE_STRIP
        box.action = Marker.ADD
        box.scale.x = line_width
        box.color = _color(r, g, b, 1.0)
        box.points = [Point(x=x, y=y, z=z) for x, y, z in [*corners, corners[0]]]
        markers.markers.append(box)
        label = _marker(label_ns, index, frame, stamp, lifetime_s)
        label.type = Marker.TEXT_VIEW_FACING
        label.action = Marker.ADD
        x, y, z = corners[0]
        text_height = max(0.1, depth_m * 0.03)
        label.pose.position.x, label.pose.position.y, label.pose.position.z = x, y - text_height, z
        label.scale.z = text_height
        label.color = _color(r, g, b, 1.0)
        label.text = detection.label + (f" {detection.score:.2f}" if detection.score is not None else "")
        markers.markers.append(label)
    for index in range(len(result.detections), previous_count):
        markers.markers.append(_delete(box_ns, index, frame, stamp))
        markers.markers.append(_delete(label_ns, index, frame, stamp))
    return markers


def detection_2d_array(result: DetectionResult, vision_msgs: Any) -> Any:
    """``vision_msgs/Detection2DArray`` (vision_msgs 4.x layout: bbox.center.position, results[].hypothesis)."""
    array = vision_msgs.Detection2DArray()
    array.header.stamp = ns_to_stamp(result.stamp_ns)
    array.header.frame_id = result.frame_id
    for index, detection in enumerate(result.detections):
        item = vision_msgs.Detection2D()
        item.header = array.header
        item.id = f"{result.camera}/{index}"
        item.bbox.center.position.x = (detection.x_min + detection.x_max) / 2.0
        item.bbox.center.position.y = (detection.y_min + detection.y_max) / 2.0
        item.bbox.size_x = detection.x_max - detection.x_min
        item.bbox.size_y = detection.y_max - detection.y_min
        hypothesis = vision_msgs.ObjectHypothesisWithPose()
        hypothesis.hypothesis.class_id = detection.label
        hypothesis.hypothesis.score = float(detection.score) if detection.score is not None else 1.0
        item.results.append(hypothesis)
        array.detections.append(item)
    return array


def answer_msg(result: AnswerResult) -> String:
    """The cleaned VQA answer as ``std_msgs/String``."""
    return String(data=result.answer)
