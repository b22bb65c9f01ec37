"""ros.outputs and ros.debug_image: Path / PlannedTrajectory / markers / detections built from results."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from rclpy.serialization import deserialize_message, serialize_message
from test_planning import STAMP, make_frame, make_observation
from visualization_msgs.msg import Marker

from wam_diff2_ros.core.camera import CameraIntrinsics
from wam_diff2_ros.core.parsing import Detection, parse_waypoints
from wam_diff2_ros.core.planning import DetectionResult, PlanResult, StageTiming
from wam_diff2_ros.ros import debug_image, outputs
from wam_diff2_ros.ros.conversions import stamp_to_ns

ANSWER = "2.0, 0.0, 4.0, 0.5, 6.0, 1.5, 8.0, 3.0, 9.5, 5.0, 10.5, 7.5, 11.0, 10.0, 11.0, 12.5"


def plan_result(text: str = ANSWER) -> PlanResult:
    parsed = parse_waypoints(text)
    return PlanResult(
        observation=make_observation(),
        prompt="the prompt",
        raw_text=text,
        valid=parsed.valid,
        reason=parsed.reason,
        waypoints=parsed.waypoints,
        timing=StageTiming(1.0, 2.0, 3.0, 4.0, 5.0, 15.0, 42.0),
        steps_per_block=(4, 70000),
        finished=True,
        model="tiny",
    )


def detection_result(intrinsics: CameraIntrinsics, detections=None) -> DetectionResult:
    return DetectionResult(
        camera="front",
        camera_index=0,
        stamp_ns=STAMP,
        frame_id="front_optical",
        width=640,
        height=360,
        intrinsics=intrinsics,
        detections=tuple(
            detections
            if detections is not None
            else [Detection("car", 100, 50, 300, 200, None), Detection("pedestrian", 400, 100, 450, 250, 0.7)]
        ),
        skipped=1,
        reason="skipped 1 of 3 entries",
        raw_text="[...]",
        prompt="Locate ...",
        timing=StageTiming(total_ms=9.0),
        steps_per_block=(2,),
        model="tiny",
    )


def yaw_of(q) -> float:
    assert q.x == 0.0 and q.y == 0.0
    assert math.hypot(q.z, q.w) == pytest.approx(1.0)
    return 2.0 * math.atan2(q.z, q.w)


def test_path_frame_stamps_and_yaw() -> None:
    result = plan_result()
    path = outputs.plan_path(result, "base_link")
    assert path.header.frame_id == "base_link"
    assert stamp_to_ns(path.header.stamp) == STAMP  # the image stamp, never now()
    assert len(path.poses) == 8
    numbers = [float(v) for v in ANSWER.split(",")]
    previous = (0.0, 0.0)
    for i, pose in enumerate(path.poses):
        assert pose.header.frame_id == "base_link"
        assert stamp_to_ns(pose.header.stamp) - STAMP == 500_000_000 * (i + 1)
        x, y = numbers[2 * i], numbers[2 * i + 1]
        assert (pose.pose.position.x, pose.pose.position.y, pose.pose.position.z) == (x, y, 0.0)
        assert yaw_of(pose.pose.orientation) == pytest.approx(math.atan2(y - previous[1], x - previous[0]))
        previous = (x, y)
    with pytest.raises(ValueError):
        outputs.plan_path(plan_result("garbage"), "base_link")


def test_trajectory_message() -> None:
    msgs, problem = outputs.own_messages()
    if msgs is None:
        pytest.skip(problem)
    trajectory = outputs.plan_trajectory(plan_result(), "base_link", msgs)
    trajectory = deserialize_message(serialize_message(trajectory), type(trajectory))
    assert trajectory.valid and trajectory.invalid_reason == ""
    assert stamp_to_ns(trajectory.header.stamp) == STAMP and trajectory.header.frame_id == "base_link"
    assert [p.time_from_start.sec + p.time_from_start.nanosec / 1e9 for p in trajectory.points] == pytest.approx(
        [0.5 * (i + 1) for i in range(8)]
    )
    assert trajectory.points[0].longitudinal_velocity_mps == pytest.approx(2.0 / 0.5)
    assert trajectory.points[1].longitudinal_velocity_mps == pytest.approx(math.hypot(2.0, 0.5) / 0.5)
    assert trajectory.raw_text == ANSWER and trajectory.prompt == "the prompt" and trajectory.model == "tiny"
    assert trajectory.navigation_command == "left"
    assert (trajectory.ego_velocity.x, trajectory.ego_acceleration.y) == pytest.approx((4.66, -1.53))
    timing = trajectory.timing
    assert (timing.preprocess_ms, timing.commit_ms, timing.total_ms, timing.end_to_end_ms) == (1.0, 5.0, 15.0, 42.0)
    assert list(trajectory.denoising_steps_per_block) == [4, 65535]  # clamped to uint16

    invalid = outputs.plan_trajectory(plan_result("1, 2, 3"), "base_link", msgs)
    assert not invalid.valid and invalid.points == [] and "expected 16 numbers, got 3" in invalid.invalid_reason


def test_plan_markers_have_stable_ids_and_lifetime() -> None:
    markers = outputs.plan_markers(plan_result(), "base_link", lifetime_s=0.5, num_waypoints=8).markers
    keys = [(m.ns, m.id) for m in markers]
    assert keys == [(outputs.PATH_NS, 0)] + [(outputs.WAYPOINTS_NS, i) for i in range(8)]
    again = outputs.plan_markers(plan_result(), "base_link", lifetime_s=0.5, num_waypoints=8).markers
    assert [(m.ns, m.id) for m in again] == keys
    line = markers[0]
    assert line.type == Marker.LINE_STRIP and line.action == Marker.ADD
    assert (line.points[0].x, line.points[0].y) == (0.0, 0.0) and len(line.points) == 9
    for marker in markers:
        assert (marker.lifetime.sec, marker.lifetime.nanosec) == (0, 500_000_000)
        assert stamp_to_ns(marker.header.stamp) == STAMP and marker.header.frame_id == "base_link"
    assert (markers[3].pose.position.x, markers[3].pose.position.y) == (6.0, 1.5)

    deleted = outputs.plan_markers(plan_result("garbage"), "base_link", lifetime_s=0.5, num_waypoints=8).markers
    assert [(m.ns, m.id) for m in deleted] == keys
    assert all(m.action == Marker.DELETE for m in deleted)


def test_detection_markers_back_project_with_camera_info() -> None:
    intrinsics = CameraIntrinsics(400.0, 420.0, 330.0, 170.0, 640, 360)
    result = detection_result(intrinsics)
    markers = outputs.detection_markers(result, depth_m=8.0, lifetime_s=1.0).markers
    boxes = [m for m in markers if m.ns == "wam_diff2/detections/front"]
    labels = [m for m in markers if m.ns == "wam_diff2/detection_labels/front"]
    assert [m.id for m in boxes] == [0, 1] and [m.id for m in labels] == [0, 1]
    assert all(m.header.frame_id == "front_optical" and stamp_to_ns(m.header.stamp) == STAMP for m in markers)
    car = boxes[0]
    assert car.type == Marker.LINE_STRIP and len(car.points) == 5
    assert (car.points[0].x, car.points[0].y, car.points[0].z) == (car.points[4].x, car.points[4].y, 8.0)
    # Each corner projects back onto the box corner pixel.
    pixels = [(100, 50), (300, 50), (300, 200), (100, 200)]
    for point, pixel in zip(car.points[:4], pixels, strict=True):
        assert point.z == 8.0
        assert intrinsics.project(point.x, point.y, point.z) == pytest.approx(pixel)
    assert labels[1].text == "pedestrian 0.70" and labels[0].text == "car"


def test_detection_markers_with_the_fallback_pinhole_and_stale_ids() -> None:
    intrinsics = CameraIntrinsics.pinhole_fallback(640, 360, 90.0)  # fx = 320
    centred = Detection("car", 300.0, 160.0, 340.0, 200.0, None)  # centred on the principal point
    result = detection_result(intrinsics, [centred])
    markers = outputs.detection_markers(result, depth_m=10.0, lifetime_s=1.0, previous_count=3).markers
    box = markers[0]
    xs = [p.x for p in box.points[:4]]
    ys = [p.y for p in box.points[:4]]
    assert (min(xs), max(xs)) == pytest.approx((-20 * 10 / 320, 20 * 10 / 320))
    assert (min(ys), max(ys)) == pytest.approx((-20 * 10 / 320, 20 * 10 / 320))
    deletes = [(m.ns.split("/")[1], m.id) for m in markers if m.action == Marker.DELETE]
    assert deletes == [("detections", 1), ("detection_labels", 1), ("detections", 2), ("detection_labels", 2)]


def test_detection_array_message() -> None:
    msgs, problem = outputs.own_messages()
    if msgs is None:
        pytest.skip(problem)
    array = outputs.detection_array(detection_result(CameraIntrinsics.pinhole_fallback(640, 360, 70)), msgs, 12.5)
    array = deserialize_message(serialize_message(array), type(array))
    assert array.camera == "front" and array.header.frame_id == "front_optical"
    assert (array.image_width, array.image_height, array.skipped_entries) == (640, 360, 1)
    assert [(d.label, d.has_score) for d in array.detections] == [("car", False), ("pedestrian", True)]
    assert array.detections[1].score == pytest.approx(0.7)
    assert (array.detections[0].x_min, array.detections[0].y_max) == (100.0, 200.0)
    assert array.timing.end_to_end_ms == 12.5 and array.timing.total_ms == 9.0


def test_detection_2d_array_layout() -> None:
    """vision_msgs is not installed here: a structural stand-in with the vision_msgs 4.x field layout."""

    def ns(**fields):
        return types.SimpleNamespace(**fields)

    class Header:
        def __init__(self):
            self.stamp, self.frame_id = None, ""

    vision = ns(
        Detection2DArray=lambda: ns(header=Header(), detections=[]),
        Detection2D=lambda: ns(
            header=None,
            id="",
            results=[],
            bbox=ns(center=ns(position=ns(x=0.0, y=0.0), theta=0.0), size_x=0.0, size_y=0.0),
        ),
        ObjectHypothesisWithPose=lambda: ns(hypothesis=ns(class_id="", score=0.0)),
    )
    array = outputs.detection_2d_array(detection_result(CameraIntrinsics.pinhole_fallback(640, 360, 70)), vision)
    car, pedestrian = array.detections
    assert (car.bbox.center.position.x, car.bbox.center.position.y, car.bbox.size_x, car.bbox.size_y) == (
        200.0,
        125.0,
        200.0,
        150.0,
    )
    assert car.results[0].hypothesis.class_id == "car" and car.results[0].hypothesis.score == 1.0
    assert pedestrian.results[0].hypothesis.score == pytest.approx(0.7) and pedestrian.id == "front/1"
    assert array.header.frame_id == "front_optical"


# --- debug image ---------------------------------------------------------------------------------------------


def test_base_to_optical_frame() -> None:
    pose = (1.6, 0.0, 1.45, 0.0, 0.0, 0.0)
    optical = debug_image.base_to_optical(np.array([[11.6, 0.0, 0.0], [1.6, 2.0, 1.45]]), pose)
    # 10 m ahead on the ground: straight ahead, 1.45 m below the optical axis; 2 m to the left: x = -2.
    np.testing.assert_allclose(optical[0], [0.0, 1.45, 10.0], atol=1e-12)
    np.testing.assert_allclose(optical[1], [-2.0, 0.0, 0.0], atol=1e-12)
    pitched = debug_image.base_to_optical(np.array([[11.6, 0.0, 1.45]]), (1.6, 0.0, 1.45, 0.0, 0.1, 0.0))
    # Pitched down (REP 103: positive pitch): a point at camera height ahead appears above the axis (y < 0).
    assert pitched[0, 1] == pytest.approx(-10.0 * math.sin(0.1)) and pitched[0, 2] == pytest.approx(10 * math.cos(0.1))


def test_debug_image_draws_boxes_and_the_path() -> None:
    frame = make_frame(width=640, height=360)
    black = np.zeros_like(frame.image)
    detections = [Detection("car", 100, 50, 300, 200, None)]
    waypoints = [(w.x, w.y) for w in plan_result().waypoints]
    pose = (1.6, 0.0, 1.45, 0.0, 0.05, 0.0)
    out = debug_image.draw_debug_image(black, detections, waypoints, camera_pose=pose, intrinsics=frame.intrinsics)
    assert out.shape == black.shape and out.dtype == np.uint8
    assert black.max() == 0  # input untouched
    colour = np.array([int(c * 255) for c in outputs.label_color("car")])
    assert np.abs(out[120, 100].astype(int) - colour).max() <= 1  # left edge of the box
    assert out[120, 200].max() == 0  # inside the box stays untouched
    # The projected ground path starts below the image (the ground right ahead is out of view), rises
    # towards the horizon and, turning left (y > 0), moves left of the centre.
    pieces = debug_image.project_path(waypoints, pose, frame.intrinsics)
    points = pieces[0]
    assert points[0][1] > 360 and points[-1][1] < points[0][1] and points[-1][0] < 320
    inside = [(round(u), round(v)) for u, v in points if 0 <= u < 640 and 0 <= v < 300]
    assert inside and all(out[v, u].max() > 0 for u, v in inside)
    inset = out[360 - 120 - 8 : 360 - 8, 640 - 120 - 8 : 640 - 8]
    assert (inset == np.array(debug_image._WAYPOINT_COLOR)).all(axis=-1).any()
    problem = debug_image.draw_debug_image(black, plan_problem="expected 16 numbers, got 3")
    text = problem[:40, :400].astype(int)
    assert ((text[..., 0] > 150) & (text[..., 1] < 100)).sum() > 20  # red (anti-aliased) text
