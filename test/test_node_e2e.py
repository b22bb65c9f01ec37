"""End to end through the real decoder over real DDS: the installed ``wam_diff2_node`` console script with a
tiny checkpoint (CPU, float32, 320×180 images, 32-token answers), fed by this process.

The random tiny checkpoint answers token soup, so the node must publish ``valid=false`` with a reason and
no Path. :func:`test_trained_checkpoint_plans` runs the same path with a checkpoint that answers in the
trained format (``$WAM_DIFF2_TRAINED_CHECKPOINT``, or the package's demo model once it ships) and then
asserts a valid plan; it is skipped while neither exists.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from core_helpers import tiny_checkpoint, wait_until
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from nav_msgs.msg import Path as PathMsg
from node_helpers import (
    REPO_ROOT,
    Collector,
    FeedSettings,
    Harness,
    NodeProcess,
    SensorFeeder,
    diagnostic_status,
    node_command,
    trained_checkpoint,
    write_params,
)
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import String

from wam_diff2_ros.ros.conversions import stamp_to_ns
from wam_diff2_ros.ros.outputs import own_messages

pytestmark = pytest.mark.ros

MSGS, MSGS_PROBLEM = own_messages()
E2E_PARAMETERS = {
    "model.device": "cpu",
    "model.dtype": "float32",
    "decoding.max_new_tokens": 32,
    "decoding.denoising_steps": 4,
    "planning.rate_hz": 2.0,
    "detection.rate_hz": 0.5,
    "detection.max_new_tokens": 32,
    "vqa.max_new_tokens": 32,
    "diagnostics.period_s": 0.5,
}


@pytest.fixture(scope="module")
def harness():
    h = Harness("e2e_harness")
    yield h
    h.close()


def start_node(tmp: Path, harness: Harness, ns: str, checkpoint: Path, **extra) -> NodeProcess:
    params = write_params(tmp / f"{ns.strip('/')}.yaml", {**E2E_PARAMETERS, "model.path": str(checkpoint), **extra})
    command = node_command([REPO_ROOT / "config" / "wam_diff2.yaml", params], "-r", f"__ns:={ns}", scripted=False)
    process = NodeProcess(command, tmp / f"{ns.strip('/')}.log")
    fqn = f"{ns}/wam_diff2"
    active = wait_until(lambda: harness.lifecycle_state(fqn, timeout=1.0) == "active" or not process.alive(), 120)
    assert active and process.alive(), process.output()
    return process


@pytest.fixture(scope="module")
def tiny_node(tmp_path_factory, harness):
    process = start_node(tmp_path_factory.mktemp("e2e"), harness, "/e2e", tiny_checkpoint())
    feeder = SensorFeeder(harness.node, "/e2e/wam_diff2", FeedSettings(compressed_camera=False, command="straight"))
    feeder.start()
    yield process, feeder
    feeder.stop()
    code = process.stop()
    print(process.output()[-3000:])
    assert code == 0


def test_random_model_answer_is_reported_invalid(tiny_node, harness) -> None:
    process, feeder = tiny_node
    paths = Collector(harness.node, PathMsg, "/e2e/wam_diff2/output/path")
    diagnostics = Collector(harness.node, DiagnosticArray, "/diagnostics")
    if MSGS is None:
        pytest.skip(MSGS_PROBLEM)
    trajectories = Collector(harness.node, MSGS.PlannedTrajectory, "/e2e/wam_diff2/output/trajectory")
    trajectory = trajectories.wait_for(timeout=60)
    assert trajectory is not None, process.output()
    assert not trajectory.valid and trajectory.invalid_reason and trajectory.points == []
    assert trajectory.header.frame_id == "base_link"
    assert stamp_to_ns(trajectory.header.stamp) in feeder.sent_image_stamps
    assert trajectory.model == tiny_checkpoint().name
    assert trajectory.raw_text  # the decoded token soup
    assert "The navigation information is: straight" in trajectory.prompt
    assert "The current velocity is: (5.00,0.00)" in trajectory.prompt
    timing = trajectory.timing
    assert timing.vision_ms > 0 and timing.prefill_ms > 0 and timing.denoise_ms > 0
    assert timing.total_ms >= timing.vision_ms + timing.denoise_ms
    assert timing.end_to_end_ms >= timing.total_ms
    assert len(trajectory.denoising_steps_per_block) == 1 and 1 <= trajectory.denoising_steps_per_block[0] <= 4

    def invalid_warning(array) -> bool:
        status = diagnostic_status(array, "planning")
        return status is not None and status.level == DiagnosticStatus.WARN and "invalid model answer" in status.message

    assert diagnostics.wait_for(invalid_warning, 10) is not None
    time.sleep(1.0)
    assert paths.snapshot() == [], "a Path was published for an invalid answer"
    assert "invalid model answer, no path published" in process.output()


def test_detection_vqa_and_debug_image_through_the_decoder(tiny_node, harness) -> None:
    process, _feeder = tiny_node
    debug = Collector(harness.node, Image, "/e2e/wam_diff2/debug/image", qos_profile_sensor_data)
    answers = Collector(harness.node, String, "/e2e/wam_diff2/output/answer")
    question = harness.node.create_publisher(String, "/e2e/wam_diff2/input/question", 10)
    try:
        image = debug.wait_for(timeout=30)
        assert image is not None and (image.width, image.height) == (320, 180)
        assert wait_until(lambda: question.get_subscription_count() > 0)
        question.publish(String(data="What is ahead?"))
        answer = answers.wait_for(timeout=30)
        assert answer is not None and not answer.data.startswith("[no answer")
        if MSGS is None:
            pytest.skip(MSGS_PROBLEM)
        detections = Collector(harness.node, MSGS.DetectionArray, "/e2e/wam_diff2/output/detections")
        array = detections.wait_for(timeout=30)
        assert array is not None and array.camera == "front" and array.raw_text
        assert (array.image_width, array.image_height) == (320, 180)
        assert array.timing.total_ms > 0
    finally:
        harness.node.destroy_publisher(question)
    assert process.alive()


def drive_frame():
    """A 640×360 frame of the synthetic sample drive on a straight (what the demo model was trained on; on
    the feeder's noise pattern it answers paths the plausibility gate rejects)."""
    from wam_diff2_ros.sim.render import render_frames

    return render_frames(25.0, 0, 640, 360, (2.0,))[0]


def test_trained_checkpoint_plans(tmp_path, harness) -> None:
    checkpoint = trained_checkpoint()
    if checkpoint is None:
        pytest.skip("no trained checkpoint yet: set WAM_DIFF2_TRAINED_CHECKPOINT or ship the demo model")
    # The age gate is opened wide here: on a loaded CI machine a CPU plan took up to 24 s (measured);
    # test_demo_plan_older_than_max_plan_age_is_stale covers the gate.
    extra = {"decoding.max_new_tokens": 128, "planning.max_plan_age_s": 600.0}
    process = start_node(tmp_path, harness, "/trained", checkpoint, **extra)
    settings = FeedSettings(
        compressed_camera=False, command="straight", pose=(10.0, 5.0, math.pi / 2), frame=drive_frame()
    )
    feeder = SensorFeeder(harness.node, "/trained/wam_diff2", settings)
    paths = Collector(harness.node, PathMsg, "/trained/wam_diff2/output/path")
    fixed_paths = Collector(harness.node, PathMsg, "/trained/wam_diff2/output/path_fixed")
    try:
        feeder.start()
        path = paths.wait_for(timeout=180)
        assert path is not None, process.output()
        assert path.header.frame_id == "base_link" and len(path.poses) == 8
        stamp = stamp_to_ns(path.header.stamp)
        assert stamp in feeder.sent_image_stamps
        assert [stamp_to_ns(p.header.stamp) - stamp for p in path.poses] == [500_000_000 * (i + 1) for i in range(8)]
        # The same plan in odom, where the ego is at (10 m, 5 m) with yaw 90°: (x, y) → (10 − y, 5 + x).
        fixed = fixed_paths.wait_for(lambda p: stamp_to_ns(p.header.stamp) == stamp, 10)
        assert fixed is not None and fixed.header.frame_id == "odom" and len(fixed.poses) == 8
        first, relative = fixed.poses[0].pose.position, path.poses[0].pose.position
        assert math.hypot(first.x - (10.0 - relative.y), first.y - (5.0 + relative.x)) <= 0.05
    finally:
        feeder.stop()
        code = process.stop(timeout=60)  # a CPU decode in flight finishes first
        assert code == 0, f"the node exited with {code}:\n{process.output()[-6000:]}"


def test_demo_plan_older_than_max_plan_age_is_stale(tmp_path, harness) -> None:
    checkpoint = trained_checkpoint()
    if checkpoint is None:
        pytest.skip("no trained checkpoint yet: set WAM_DIFF2_TRAINED_CHECKPOINT or ship the demo model")
    if MSGS is None:
        pytest.skip(MSGS_PROBLEM)
    # 0.2 s is below any CPU plan time of the demo model (about 1.3 s on an idle machine).
    extra = {"decoding.max_new_tokens": 128, "planning.max_plan_age_s": 0.2}
    process = start_node(tmp_path, harness, "/stale", checkpoint, **extra)
    settings = FeedSettings(compressed_camera=False, command="straight", frame=drive_frame())
    feeder = SensorFeeder(harness.node, "/stale/wam_diff2", settings)
    paths = Collector(harness.node, PathMsg, "/stale/wam_diff2/output/path")
    trajectories = Collector(harness.node, MSGS.PlannedTrajectory, "/stale/wam_diff2/output/trajectory")
    diagnostics = Collector(harness.node, DiagnosticArray, "/diagnostics")
    try:
        feeder.start()
        trajectory = trajectories.wait_for(timeout=180)
        assert trajectory is not None, process.output()
        assert not trajectory.valid and trajectory.invalid_reason.startswith("stale plan: ")
        assert "s old when ready (planning.max_plan_age_s 0.2 s)" in trajectory.invalid_reason
        assert trajectory.points == []

        def stale_warning(array) -> bool:
            status = diagnostic_status(array, "planning")
            return status is not None and status.level == DiagnosticStatus.WARN and "stale plan" in status.message

        assert diagnostics.wait_for(stale_warning, 10) is not None
        assert paths.snapshot() == [], "a Path was published for a stale plan"
        assert "no path published: stale plan" in process.output()
    finally:
        feeder.stop()
        code = process.stop(timeout=60)  # a CPU decode in flight finishes first
        assert code == 0, f"the node exited with {code}:\n{process.output()[-6000:]}"


def test_fast_and_exact_engines_publish_the_same_plans(tmp_path, harness) -> None:
    """Two nodes on the same sensor feed, `decoding.engine: exact` and `fast`: for the same prompt (image
    content, command, telemetry) they publish the same answer and waypoints."""
    checkpoint = trained_checkpoint()
    if checkpoint is None:
        pytest.skip("no trained checkpoint yet: set WAM_DIFF2_TRAINED_CHECKPOINT or ship the demo model")
    if MSGS is None:
        pytest.skip(MSGS_PROBLEM)
    extra = {"decoding.max_new_tokens": 128, "decoding.denoising_steps": 32, "planning.max_plan_age_s": 600.0}
    runs = {}
    for engine in ("exact", "fast"):
        ns = f"/{engine}_engine"
        process = start_node(tmp_path, harness, ns, checkpoint, **{**extra, "decoding.engine": engine})
        settings = FeedSettings(compressed_camera=False, command="straight", frame=drive_frame())
        runs[engine] = (
            process,
            SensorFeeder(harness.node, f"{ns}/wam_diff2", settings),
            Collector(harness.node, MSGS.PlannedTrajectory, f"{ns}/wam_diff2/output/trajectory"),
        )
    try:
        for _, feeder, _ in runs.values():
            feeder.start()
        plans = {}
        for engine, (process, _, trajectories) in runs.items():
            assert trajectories.wait_for(lambda t: t.valid, timeout=240) is not None, process.output()
            plans[engine] = {t.prompt: t for t in trajectories.snapshot() if t.valid}
        shared = sorted(set(plans["exact"]) & set(plans["fast"]))
        assert shared, "no prompt planned by both nodes"
        for prompt in shared:
            exact, fast = plans["exact"][prompt], plans["fast"][prompt]
            assert fast.raw_text == exact.raw_text
            assert [(p.pose.position.x, p.pose.position.y) for p in fast.points] == [
                (p.pose.position.x, p.pose.position.y) for p in exact.points
            ]
        assert "decoding engine exact (decoding.engine: exact)" in runs["exact"][0].output()
        assert "decoding engine fast (decoding.engine: fast)" in runs["fast"][0].output()
    finally:
        for process, feeder, _ in runs.values():
            feeder.stop()
            assert process.stop(timeout=60) == 0
