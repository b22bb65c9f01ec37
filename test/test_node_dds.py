"""The node over real DDS with the scripted test-double engine: a child process running ``wam_diff2_node``'s
``main()`` (``node_helpers.py``), fed by this process at realistic rates (front camera raw 10 Hz,
a second camera JPEG 10 Hz, odometry 50 Hz, command 2 Hz), answering valid plans.

Covers: Path / trajectory / markers frames, stamps, 8 poses and times; invalid answers; stale odometry;
corrupt JPEG, unknown encoding, 0×0 image, NaN odometry, unknown command (each survived with a
diagnostic); detections, detection markers, debug image; VQA; an engine exception; executor
responsiveness during a slow inference; lifecycle deactivate/activate; configure failure on bad
parameters. The real decoder over DDS is in ``test_node_e2e.py``.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from core_helpers import wait_until
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from lifecycle_msgs.msg import Transition
from nav_msgs.msg import Path as PathMsg
from node_helpers import (
    REPO_ROOT,
    Collector,
    FeedSettings,
    Harness,
    NodeProcess,
    SensorFeeder,
    diagnostic_status,
    diagnostic_values,
    node_command,
    write_params,
)
from rclpy.qos import qos_profile_sensor_data
from scripted_engine import scripted_plan
from sensor_msgs.msg import Image
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from wam_diff2_ros.core.units import NS_PER_S
from wam_diff2_ros.ros.conversions import stamp_to_ns
from wam_diff2_ros.ros.outputs import own_messages

pytestmark = pytest.mark.ros

NS = "/dds_test"
NODE = f"{NS}/wam_diff2"
TEMPLATE_2 = (
    "Front: <image>\nLeft: <image>\nThe navigation information is: {command}\n"
    "The current velocity is: ({vx},{vy}) and current accelerate is: ({ax},{ay})\nPlan 8 waypoints."
)
MSGS, MSGS_PROBLEM = own_messages()


@pytest.fixture(scope="module")
def harness():
    h = Harness("dds_test_harness")
    yield h
    h.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory, harness):
    tmp = tmp_path_factory.mktemp("dds_node")
    params = write_params(
        tmp / "test.yaml",
        {
            "model.path": str(tmp),  # the scripted engine ignores it; validation wants a directory
            "cameras.names": ["front", "left"],
            "cameras.transports": ["raw", "compressed"],
            "prompt.template": TEMPLATE_2,
            "planning.rate_hz": 4.0,
            "detection.rate_hz": 1.0,
            "detection.categories": ["car", "pedestrian"],
            "detection.marker_depth_m": 12.0,
            "debug.camera_pose": [1.6, 0.0, 1.45, 0.0, 0.03, 0.0],
            "diagnostics.period_s": 0.5,
            "diagnostics.warn_throttle_s": 1.0,
        },
    )
    process = NodeProcess(
        node_command([REPO_ROOT / "config" / "wam_diff2.yaml", params], "-r", f"__ns:={NS}"), tmp / "node.log"
    )
    try:
        active = wait_until(lambda: not process.alive() or harness.lifecycle_state(NODE, timeout=2.0) == "active", 60)
        assert active and process.alive(), process.output()
        yield process
    finally:
        code = process.stop()
        print(process.output()[-3000:])
    assert code == 0, f"node exited with {code}"


@pytest.fixture(scope="module")
def feeder(node, harness):
    f = SensorFeeder(harness.node, NODE, FeedSettings()).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def topics(node, harness):
    """Collectors for every output topic, created once."""
    n = harness.node
    collectors = {
        "path": Collector(n, PathMsg, f"{NODE}/output/path"),
        "path_fixed": Collector(n, PathMsg, f"{NODE}/output/path_fixed"),
        "markers": Collector(n, MarkerArray, f"{NODE}/output/markers"),
        "answer": Collector(n, String, f"{NODE}/output/answer"),
        "diagnostics": Collector(n, DiagnosticArray, "/diagnostics"),
        "debug": Collector(n, Image, f"{NODE}/debug/image", qos_profile_sensor_data),
    }
    if MSGS is not None:
        collectors["trajectory"] = Collector(n, MSGS.PlannedTrajectory, f"{NODE}/output/trajectory")
        collectors["trajectory_fixed"] = Collector(n, MSGS.PlannedTrajectory, f"{NODE}/output/trajectory_fixed")
        collectors["detections"] = Collector(n, MSGS.DetectionArray, f"{NODE}/output/detections")
    return collectors


@pytest.fixture
def feed(feeder):
    """The running feeder, reset to the defaults after the test."""
    yield feeder.settings
    for name, value in FeedSettings().__dict__.items():
        setattr(feeder.settings, name, value)


def newer_than(stamp_ns: int):
    return lambda msg: stamp_to_ns(msg.header.stamp) > stamp_ns


def now_ns(harness) -> int:
    return harness.node.get_clock().now().nanoseconds


def wait_status(topics, suffix: str, level: bytes, text: str, timeout: float = 10.0):
    """The first diagnostics status ``<node>: suffix`` with ``level`` whose message contains ``text``."""

    def matches(array) -> bool:
        status = diagnostic_status(array, suffix)
        return status is not None and status.level == level and text in status.message

    array = topics["diagnostics"].wait_for(matches, timeout, new_only=True)
    return None if array is None else diagnostic_status(array, suffix)


def assert_planning_resumes(topics, harness, timeout: float = 10.0) -> None:
    start = now_ns(harness)
    assert topics["path"].wait_for(newer_than(start), timeout) is not None, "planning did not resume"


# --- plans ---------------------------------------------------------------------------------------------------


def test_path_trajectory_and_markers(node, feeder, topics, harness) -> None:
    path = topics["path"].wait_for(timeout=20)
    assert path is not None, node.output()
    stamp = stamp_to_ns(path.header.stamp)
    assert path.header.frame_id == "base_link"
    assert stamp in feeder.sent_image_stamps  # the front image's stamp, never now()
    assert len(path.poses) == 8
    expected = scripted_plan("left", 5.0)
    previous = (0.0, 0.0)
    for i, pose in enumerate(path.poses):
        assert stamp_to_ns(pose.header.stamp) - stamp == 500_000_000 * (i + 1)
        assert pose.header.frame_id == "base_link"
        x, y = pose.pose.position.x, pose.pose.position.y
        assert (x, y) == pytest.approx(expected[i], abs=0.006)
        yaw = 2 * math.atan2(pose.pose.orientation.z, pose.pose.orientation.w)
        assert yaw == pytest.approx(math.atan2(y - previous[1], x - previous[0]))
        previous = (x, y)

    markers = topics["markers"].wait_for(lambda m: any(x.ns == "wam_diff2/path" for x in m.markers), 10)
    assert markers is not None
    plan_markers = [m for m in markers.markers if m.ns in ("wam_diff2/path", "wam_diff2/waypoints")]
    assert sorted((m.ns, m.id) for m in plan_markers) == [("wam_diff2/path", 0)] + [
        ("wam_diff2/waypoints", i) for i in range(8)
    ]
    assert all(m.lifetime.sec == 0 and m.lifetime.nanosec == 250_000_000 for m in plan_markers)  # 1 / 4 Hz

    if MSGS is None:
        pytest.skip(MSGS_PROBLEM)
    trajectory = topics["trajectory"].wait_for(lambda t: stamp_to_ns(t.header.stamp) == stamp, 10)
    assert trajectory is not None and trajectory.valid and trajectory.invalid_reason == ""
    assert trajectory.header.frame_id == "base_link" and len(trajectory.points) == 8
    assert [p.time_from_start.sec * 10**9 + p.time_from_start.nanosec for p in trajectory.points] == [
        500_000_000 * (i + 1) for i in range(8)
    ]
    assert trajectory.prompt.startswith("Front: <image>\nLeft: <image>\nThe navigation information is: left")
    assert "The current velocity is: (5.00,0.00)" in trajectory.prompt
    assert trajectory.navigation_command == "left" and trajectory.model == "scripted-engine"
    assert list(trajectory.denoising_steps_per_block) == [3, 2]
    timing = trajectory.timing
    assert (timing.preprocess_ms, timing.vision_ms, timing.prefill_ms, timing.denoise_ms, timing.commit_ms) == (
        pytest.approx(2.0),
        pytest.approx(3.0),
        pytest.approx(4.0),
        pytest.approx(10.0),
        pytest.approx(1.0),
    )
    assert 0.0 < timing.end_to_end_ms < 2000.0


def test_invalid_answer_gives_a_reason_and_no_path(node, feed, topics, harness) -> None:
    if MSGS is None:
        pytest.skip(MSGS_PROBLEM)
    feed.command = "unknown"  # the scripted engine answers prose to this
    start = now_ns(harness)
    invalid = topics["trajectory"].wait_for(lambda t: newer_than(start)(t) and not t.valid, 10)
    assert invalid is not None
    assert "unexpected text" in invalid.invalid_reason and invalid.points == []
    assert invalid.raw_text == "I cannot plan without a route"
    paths = [p for p in topics["path"].snapshot() if stamp_to_ns(p.header.stamp) == stamp_to_ns(invalid.header.stamp)]
    assert paths == []  # no Path for the invalid answer
    status = wait_status(topics, "planning", DiagnosticStatus.WARN, "invalid model answer")
    assert status is not None and float(diagnostic_values(status)["invalid_answer_rate"]) > 0
    feed.command = "left"
    assert_planning_resumes(topics, harness)


def test_stale_odometry_suppresses_planning(node, feed, topics, harness) -> None:
    feed.odometry_offset_s = -1.0  # stamps one second old
    # While the buffer turns over, "not enough odometry history to derive acceleration" can come first.
    status = wait_status(topics, "planning", DiagnosticStatus.WARN, "nearest odometry is")
    assert status is not None and "from the front image" in status.message
    # a plan in flight (started before the refusal) carries an older image stamp: no settling time needed
    quiet_from = now_ns(harness)
    time.sleep(1.5)  # the window observed (a busy machine plans less in it, never wrongly)
    fresh = [p for p in topics["path"].snapshot() if stamp_to_ns(p.header.stamp) > quiet_from]
    assert fresh == [], "planned on stale odometry"
    assert "no plan: odometry" in node.output()
    feed.odometry_offset_s = 0.0
    assert_planning_resumes(topics, harness)


@pytest.mark.parametrize(
    ("change", "suffix", "text"),
    [
        ({"corrupt_compressed": True}, "inputs", "image_1 (left): corrupt JPEG"),  # seen at arrival
        ({"encoding": "weird8"}, "inputs", "image_0 (front): unsupported encoding 'weird8'"),
        ({"zero_size": True}, "inputs", "image_0 (front): image has no pixels (0x0)"),
        ({"odometry_nan": True}, "inputs", "odometry: odometry twist is not finite"),
        ({"command": "sideways"}, "inputs", "command: unknown navigation command 'sideways'"),
    ],
    ids=["corrupt-jpeg", "unknown-encoding", "zero-size", "nan-odometry", "unknown-command"],
)
def test_bad_input_is_survived_with_a_diagnostic(node, feed, topics, harness, change, suffix, text) -> None:
    for name, value in change.items():
        setattr(feed, name, value)
    status = wait_status(topics, suffix, DiagnosticStatus.WARN, text)
    assert status is not None, f"no diagnostic containing {text!r}"
    assert node.alive()
    for name in change:
        setattr(feed, name, getattr(FeedSettings(), name))
    assert_planning_resumes(topics, harness)
    assert node.alive()


@pytest.mark.parametrize("encoding", ["bgr8", "mono8", "yuv422"])
def test_other_encodings_are_planned_on(node, feed, topics, harness, encoding: str) -> None:
    feed.encoding = encoding  # a plan on an image stamped after now (assert_planning_resumes) is on this encoding
    assert_planning_resumes(topics, harness)


def test_engine_failure_is_reported_and_the_worker_continues(node, feed, topics, harness) -> None:
    feed.vx = 99.0  # the scripted engine raises for this speed
    status = wait_status(topics, "planning", DiagnosticStatus.ERROR, "scripted engine failure")
    assert status is not None and "inference failed: RuntimeError" in status.message
    feed.vx = 5.0
    assert_planning_resumes(topics, harness)
    assert "planning failed: RuntimeError: scripted engine failure" in node.output()


# --- plans a controller can trust ----------------------------------------------------------------------------


def test_fixed_frame_path_is_the_plan_transformed_by_the_ego_pose(node, feeder, feed, topics, harness) -> None:
    sent = len(feeder.sent_odometry_stamps)
    feed.pose = (10.0, 5.0, math.pi / 2)  # the ego at (10 m, 5 m), yaw 90° in odom
    # the second odometry sent from now on carries the new pose; a plan on an image stamped after the third has two
    # odometry samples with the new pose before it (interpolated or extrapolated, only new poses count) once the node
    # has them. Odometry and images are separate topics with no order between them: on a loaded machine the node can
    # take an image before odometry sent earlier, and place it by the old pose. So the plan checked is on an image
    # stamped 1 s later (50 odometry samples with the new pose sent before it).
    assert wait_until(lambda: len(feeder.sent_odometry_stamps) >= sent + 3)
    start = feeder.sent_odometry_stamps[sent + 2] + NS_PER_S
    fixed = topics["path_fixed"].wait_for(newer_than(start), 15)
    assert fixed is not None, node.output()
    stamp = stamp_to_ns(fixed.header.stamp)
    base = topics["path"].wait_for(lambda p: stamp_to_ns(p.header.stamp) == stamp, 5)
    assert base is not None and base.header.frame_id == "base_link"
    assert fixed.header.frame_id == "odom" and len(fixed.poses) == 8
    for stamped, relative in zip(fixed.poses, base.poses, strict=True):
        x, y = relative.pose.position.x, relative.pose.position.y
        # yaw 90°: (x, y) in base_link lands at (10 − y, 5 + x) in odom.
        assert stamped.pose.position.x == pytest.approx(10.0 - y, abs=0.05)
        assert stamped.pose.position.y == pytest.approx(5.0 + x, abs=0.05)
        assert stamped.header.frame_id == "odom" and stamped.header.stamp == relative.header.stamp
    if MSGS is None:
        pytest.skip(MSGS_PROBLEM)
    trajectory = topics["trajectory_fixed"].wait_for(lambda t: stamp_to_ns(t.header.stamp) == stamp, 5)
    assert trajectory is not None and trajectory.valid and trajectory.header.frame_id == "odom"
    assert trajectory.points[0].pose.position.x == pytest.approx(fixed.poses[0].pose.position.x)


def test_a_command_topic_that_stops_stops_planning(node, feed, topics, harness) -> None:
    feed.commands = False  # the default command.max_age_s (3 s) applies
    status = wait_status(topics, "planning", DiagnosticStatus.WARN, "latest command is", timeout=10)
    assert status is not None and "(limit 3 s)" in status.message
    quiet_from = now_ns(harness)  # a plan already in flight carries an older image stamp
    time.sleep(1.5)  # the window observed
    assert [p for p in topics["path"].snapshot() if stamp_to_ns(p.header.stamp) > quiet_from] == []
    feed.commands = True
    assert_planning_resumes(topics, harness)


def test_a_repeated_problem_is_logged_once_per_throttle_period(node, feed, topics, harness) -> None:
    # Stale odometry at 4 Hz planning: "nearest odometry is -10xx ms ..." with numbers changing every cycle.
    feed.odometry_offset_s = -1.0
    assert wait_status(topics, "planning", DiagnosticStatus.WARN, "nearest odometry is") is not None
    time.sleep(1.0)
    before = node.output()
    window_s = 4.0
    time.sleep(window_s)
    added = node.output()[len(before) :]
    warnings = [line for line in added.splitlines() if "no plan: odometry: nearest odometry is" in line]
    # diagnostics.warn_throttle_s is 1 s: one line per second (the 16 planning cycles would log 16).
    assert 1 <= len(warnings) <= window_s + 1, added
    assert "object at 0x" not in added
    feed.odometry_offset_s = 0.0
    assert_planning_resumes(topics, harness)


# --- detection, debug image, VQA -----------------------------------------------------------------------------


def test_detections_markers_and_debug_image(node, feeder, topics, harness) -> None:
    markers = topics["markers"].wait_for(lambda m: any(x.ns.startswith("wam_diff2/detections/") for x in m.markers), 10)
    assert markers is not None
    boxes = [m for m in markers.markers if m.ns == "wam_diff2/detections/front"]
    labels = [m for m in markers.markers if m.ns == "wam_diff2/detection_labels/front"]
    assert [m.id for m in boxes] == [0, 1] and [m.text for m in labels] == ["car", "pedestrian 0.80"]
    assert all(m.header.frame_id == "front_optical" for m in boxes)
    assert all(p.z == pytest.approx(12.0) for m in boxes for p in m.points)
    assert all(m.lifetime.sec == 1 for m in boxes)
    debug = topics["debug"].wait_for(timeout=10)
    assert debug is not None
    assert (debug.width, debug.height, debug.encoding) == (320, 180, "rgb8")
    assert debug.header.frame_id == "front_optical" and stamp_to_ns(debug.header.stamp) in feeder.sent_image_stamps
    if MSGS is None:
        pytest.skip(MSGS_PROBLEM)
    detections = topics["detections"].wait_for(timeout=10)
    assert detections is not None and detections.camera == "front"
    assert (detections.image_width, detections.image_height) == (320, 180)
    car = detections.detections[0]
    assert (car.label, car.has_score) == ("car", False)
    assert (car.x_min, car.y_min, car.x_max, car.y_max) == pytest.approx((32.0, 36.0, 128.0, 108.0))
    assert detections.detections[1].has_score and detections.detections[1].score == pytest.approx(0.8)


def test_question_is_answered(node, feeder, topics, harness) -> None:
    publisher = harness.node.create_publisher(String, f"{NODE}/input/question", 10)
    try:
        assert wait_until(lambda: publisher.get_subscription_count() > 0)
        topics["answer"].clear()
        publisher.publish(String(data="What is in front of the car?"))
        answer = topics["answer"].wait_for(timeout=10)
        assert answer is not None and answer.data == "I see 2 image(s), the first is 320x180."
    finally:
        harness.node.destroy_publisher(publisher)


def test_executor_stays_responsive_during_a_slow_inference(node, feeder, topics, harness) -> None:
    publisher = harness.node.create_publisher(String, f"{NODE}/input/question", 10)
    try:
        assert wait_until(lambda: publisher.get_subscription_count() > 0)
        topics["answer"].clear()
        publisher.publish(String(data="sleep 3 please"))  # the scripted engine sleeps 3 s
        time.sleep(0.5)
        started = time.monotonic()
        values = harness.get_parameters(NODE, ["planning.rate_hz"], timeout=5)
        latency = time.monotonic() - started
        assert values is not None and values[0].double_value == 4.0
        assert latency < 1.0, f"parameter service took {latency:.2f} s while the model ran"
        # Diagnostics keep coming and inputs keep being received while the worker is busy.
        received = []
        deadline = time.monotonic() + 1.6
        while time.monotonic() < deadline:
            latest = topics["diagnostics"].snapshot()[-1]
            status = diagnostic_status(latest, "inputs")
            received.append(int(diagnostic_values(status)["odometry received"]))
            time.sleep(0.1)
        assert received[-1] > received[0], "odometry callbacks stalled during inference"
        assert topics["answer"].snapshot() == []  # still sleeping
        answer = topics["answer"].wait_for(timeout=10)
        assert answer is not None and answer.data.startswith("I see 2 image(s)")
    finally:
        harness.node.destroy_publisher(publisher)


# --- lifecycle (last: it changes the node's state) ---------------------------------------------------------------


def test_deactivate_and_activate(node, feeder, topics, harness) -> None:
    image_topic = f"{NODE}/input/image_0"
    assert harness.node.count_subscribers(image_topic) >= 1
    assert harness.change_state(NODE, Transition.TRANSITION_DEACTIVATE) is True
    assert harness.lifecycle_state(NODE) == "inactive"
    assert wait_until(lambda: harness.node.count_subscribers(image_topic) == 0)
    quiet_from = now_ns(harness)  # a plan already in flight carries an older image stamp
    time.sleep(1.0)  # the window observed
    assert [p for p in topics["path"].snapshot() if stamp_to_ns(p.header.stamp) > quiet_from] == []
    status = wait_status(topics, "model", DiagnosticStatus.WARN, "inactive")
    assert status is not None
    assert harness.change_state(NODE, Transition.TRANSITION_ACTIVATE) is True
    assert harness.lifecycle_state(NODE) == "active"
    assert_planning_resumes(topics, harness, timeout=15)
    # cleanup and configure again (from inactive)
    assert harness.change_state(NODE, Transition.TRANSITION_DEACTIVATE) is True
    assert harness.change_state(NODE, Transition.TRANSITION_CLEANUP) is True
    assert harness.lifecycle_state(NODE) == "unconfigured"
    assert harness.change_state(NODE, Transition.TRANSITION_CONFIGURE) is True
    assert harness.change_state(NODE, Transition.TRANSITION_ACTIVATE) is True
    assert_planning_resumes(topics, harness, timeout=15)


def test_bad_parameters_fail_configure_and_the_node_stays_up(tmp_path: Path, harness) -> None:
    ns = "/bad_params"
    params = write_params(
        tmp_path / "bad.yaml", {"model.path": str(tmp_path), "planning.rate_hz": -1.0, "sync.max_age_ms": 0}
    )
    process = NodeProcess(node_command([params], "-r", f"__ns:={ns}"), tmp_path / "node.log")
    fqn = f"{ns}/wam_diff2"
    try:
        assert wait_until(lambda: "configure failed" in process.output(), timeout=60), process.output()
        assert harness.lifecycle_state(fqn) == "unconfigured"
        assert process.alive()
        log = process.output()
        assert "planning.rate_hz: must be >= 0, got -1" in log and "sync.max_age_ms: must be > 0" in log
        # Fix the parameters and configure by hand: the same process recovers.
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import SetParameters

        request = SetParameters.Request(
            parameters=[
                Parameter(name=name, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value))
                for name, value in (("planning.rate_hz", 2.0), ("sync.max_age_ms", 100.0))
            ]
        )
        response = harness.call(SetParameters, f"{fqn}/set_parameters", request)
        assert response is not None and all(r.successful for r in response.results)
        assert harness.change_state(fqn, Transition.TRANSITION_CONFIGURE) is True
        assert harness.lifecycle_state(fqn) == "inactive"
    finally:
        assert process.stop() == 0


@pytest.mark.parametrize("use_profile", [True, False])
def test_main_applies_the_fast_dds_profile_for_large_images(tmp_path: Path, harness, use_profile: bool) -> None:
    """Started without the profile variable, main() sets it before rclpy.init: the node then publishes 1080p
    debug images (6.2 MB, best-effort) that arrive here (with Fast DDS defaults they are lost)."""
    ns = "/profile_test"
    fqn = f"{ns}/wam_diff2"
    params = write_params(
        tmp_path / "p.yaml", {"model.path": str(tmp_path), "planning.rate_hz": 4.0, "diagnostics.period_s": 0.5}
    )
    env = {"FASTDDS_DEFAULT_PROFILES_FILE": None, "FASTRTPS_DEFAULT_PROFILES_FILE": None}
    if not use_profile:
        env["WAM_DIFF2_NO_FASTDDS_PROFILE"] = "1"
    process = NodeProcess(node_command([params], "-r", f"__ns:={ns}"), tmp_path / "node.log", env=env)
    paths = Collector(harness.node, PathMsg, f"{fqn}/output/path")
    debug = Collector(harness.node, Image, f"{fqn}/debug/image", qos_profile_sensor_data)
    feeder = None
    try:
        assert wait_until(lambda: harness.lifecycle_state(fqn, timeout=1.0) == "active", timeout=60), process.output()
        assert ("Fast DDS profile: FASTDDS_DEFAULT_PROFILES_FILE=" in process.output()) == use_profile
        settings = FeedSettings(width=1920, height=1080, compressed_camera=False, image_rate_hz=5.0)
        feeder = SensorFeeder(harness.node, fqn, settings)
        feeder.start()
        assert paths.wait_for(timeout=20) is not None, process.output()
        paths.clear()
        debug.clear()
        assert wait_until(lambda: len(paths.snapshot()) >= 4, 30), process.output()  # an event, not a rate
        planned, shown = len(paths.snapshot()), len(debug.snapshot())
        print(f"1080p debug images: {shown} received for {planned} plans (profile {use_profile})")
        assert planned >= 4
        if use_profile:
            assert shown >= 0.5 * planned
            assert (debug.snapshot()[0].width, debug.snapshot()[0].height) == (1920, 1080)
    finally:
        if feeder is not None:
            feeder.stop()
        code = process.stop(timeout=20.0)
        assert code == 0, f"node exited with {code}: {process.output()[-3000:]}"


def test_sim_time_stamps_and_freshness_follow_clock(tmp_path: Path, harness) -> None:
    """With use_sim_time the node's clock is /clock: data stamped in simulated time (1000 s, decades from the wall
    clock, so stale by wall time) passes the freshness checks, timers fire on /clock and plans carry sim stamps."""
    from rclpy.time import Time
    from rosgraph_msgs.msg import Clock

    ns = "/sim_time"
    fqn = f"{ns}/wam_diff2"
    params = write_params(tmp_path / "p.yaml", {"model.path": str(tmp_path), "use_sim_time": True})
    process = NodeProcess(node_command([params], "-r", f"__ns:={ns}"), tmp_path / "node.log")
    clock_pub = harness.node.create_publisher(Clock, "/clock", 10)
    wall_start = time.monotonic()
    sim_start_ns = 1000 * 10**9

    def sim_now() -> Time:
        return Time(nanoseconds=sim_start_ns + round((time.monotonic() - wall_start) * 1e9))

    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            clock_pub.publish(Clock(clock=sim_now().to_msg()))
            stop.wait(0.01)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    paths = Collector(harness.node, PathMsg, f"{fqn}/output/path")
    feeder = SensorFeeder(harness.node, fqn, FeedSettings(compressed_camera=False), clock=sim_now)
    try:
        assert wait_until(lambda: harness.lifecycle_state(fqn, timeout=1.0) == "active", timeout=60), process.output()
        feeder.start()
        path = paths.wait_for(timeout=20)
        assert path is not None, process.output()
        stamp = stamp_to_ns(path.header.stamp)
        assert sim_start_ns < stamp < sim_start_ns + 120 * 10**9  # simulated time, not wall time
    finally:
        feeder.stop()
        stop.set()
        ticker.join(2.0)
        harness.node.destroy_publisher(clock_pub)
        assert process.stop() == 0


def test_spin_survives_invalid_handle_races() -> None:
    """rclpy's wait-set race (InvalidHandle out of spin_once) does not end the spin loop; shutdown does."""
    import rclpy
    from rclpy.context import Context
    from rclpy.exceptions import InvalidHandle

    from wam_diff2_ros.ros.process import spin_until_shutdown

    context = Context()
    rclpy.init(context=context)

    class RacingExecutor:
        turns = 0

        def spin_once(self, timeout_sec: float | None = None) -> None:
            self.turns += 1
            if self.turns in (2, 3):
                raise InvalidHandle("cannot use Destroyable because destruction was requested")
            if self.turns == 5:
                context.try_shutdown()

    executor = RacingExecutor()
    assert spin_until_shutdown(executor, context) == 2  # type: ignore[arg-type]
    assert executor.turns == 5
