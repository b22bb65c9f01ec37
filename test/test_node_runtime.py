"""ros.runtime and ros.diagnostics without DDS: messages in, output messages out (what the replay tool runs)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from core_helpers import tiny_checkpoint
from geometry_msgs.msg import AccelWithCovarianceStamped
from nav_msgs.msg import Odometry
from node_helpers import jpeg_msg, rgb_image_msg
from PIL import Image as PILImage
from scripted_engine import ScriptedEngine, scripted_plan
from sensor_msgs.msg import CameraInfo
from std_msgs.msg import String

from wam_diff2_ros.core.planning import StageTiming
from wam_diff2_ros.core.samples import InputProblem
from wam_diff2_ros.core.units import NS_PER_MS
from wam_diff2_ros.ros.conversions import ns_to_stamp, stamp_to_ns
from wam_diff2_ros.ros.diagnostics import ERROR, OK, WARN, KeyedThrottle, NodeHealth
from wam_diff2_ros.ros.params import NodeConfig
from wam_diff2_ros.ros.runtime import PlannerRuntime

T0 = 1_700_000_000 * 1_000_000_000
TEMPLATE_2 = (
    "Front: <image>\nLeft: <image>\nThe navigation information is: {command}\n"
    "The current velocity is: ({vx},{vy}) and current accelerate is: ({ax},{ay})\nPlan 8 waypoints."
)
IMAGE = np.random.default_rng(5).integers(0, 256, size=(180, 320, 3), dtype=np.uint8)


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def config(**overrides) -> NodeConfig:
    values = {
        "model.path": str(tiny_checkpoint()),
        "cameras.names": ["front", "left"],
        "cameras.transports": ["raw", "compressed"],
        "prompt.template": TEMPLATE_2,
        "detection.rate_hz": 1.0,
        **overrides,
    }
    return NodeConfig.from_parameters(values)


def odometry(stamp_ns: int, vx: float) -> Odometry:
    msg = Odometry()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.child_frame_id = "base_link"
    msg.twist.twist.linear.x = vx
    return msg


def feed(runtime: PlannerRuntime, end_ns: int, command: str = "right", vx: float = 6.0) -> list[InputProblem | None]:
    """One second of 50 Hz odometry, a command and one frame per camera at ``end_ns``."""
    results = []
    for k in range(51):
        stamp = end_ns - (50 - k) * 20 * NS_PER_MS
        results.append(runtime.on_odometry(odometry(stamp, vx), stamp))
    results.append(runtime.on_command(String(data=command), end_ns))
    results.append(runtime.on_image(0, rgb_image_msg(IMAGE, ns_to_stamp(end_ns)), end_ns))
    results.append(runtime.on_compressed_image(1, jpeg_msg(IMAGE, ns_to_stamp(end_ns - 10 * NS_PER_MS)), end_ns))
    return results


def test_messages_in_plan_messages_out() -> None:
    clock = Clock(T0 + 120 * NS_PER_MS)
    runtime = PlannerRuntime(config(), ScriptedEngine(), clock)
    assert all(problem is None for problem in feed(runtime, T0))
    cycle = runtime.plan(clock.now, debug_image=True)
    assert cycle.problems == () and cycle.result is not None and cycle.result.valid
    path = cycle.path
    assert stamp_to_ns(path.header.stamp) == T0 and path.header.frame_id == "base_link"
    expected = scripted_plan("right", 6.0)
    assert [p.pose.position.y for p in path.poses] == pytest.approx([y for _, y in expected], abs=0.006)
    assert cycle.end_to_end_ms == pytest.approx(120.0)
    if runtime.msgs is not None:
        assert cycle.trajectory.valid and cycle.trajectory.timing.end_to_end_ms == pytest.approx(120.0)
        assert cycle.trajectory.navigation_command == "right"
        assert "(6.00,0.00)" in cycle.trajectory.prompt
    assert len(cycle.markers.markers) == 9
    assert cycle.debug_image.encoding == "rgb8" and cycle.debug_image.header.frame_id == "front_optical"
    # Both cameras went into the prompt, in order, the JPEG one decoded.
    images = runtime.pipeline.engine.calls[-1]["images"]
    assert [img.shape for img in images] == [(180, 320, 3), (180, 320, 3)]
    np.testing.assert_array_equal(images[0], IMAGE)
    jpeg = jpeg_msg(IMAGE, ns_to_stamp(T0))
    np.testing.assert_array_equal(images[1], np.asarray(PILImage.open(io.BytesIO(bytes(jpeg.data))).convert("RGB")))
    # Nothing new: idle.
    assert runtime.plan(clock.now).idle


def test_bad_messages_are_dropped_with_the_input_named() -> None:
    runtime = PlannerRuntime(config(), ScriptedEngine(), Clock())
    bad = rgb_image_msg(IMAGE, ns_to_stamp(T0), encoding="weird8")
    assert runtime.on_image(0, bad, T0) == InputProblem("image_0 (front)", runtime.on_image(0, bad, T0).reason)
    assert "unsupported encoding 'weird8'" in runtime.on_image(0, bad, T0).reason
    assert "no pixels (0x0)" in runtime.on_image(0, rgb_image_msg(IMAGE[:0, :0], ns_to_stamp(T0)), T0).reason
    nan = odometry(T0, math.nan)
    assert runtime.on_odometry(nan, T0).input == "odometry"
    assert "unknown navigation command" in runtime.on_command(String(data="sideways"), T0).reason
    accel = AccelWithCovarianceStamped()
    accel.header.stamp = ns_to_stamp(T0)
    accel.accel.accel.linear.y = math.inf
    assert runtime.on_acceleration(accel, T0).input == "acceleration"
    info = CameraInfo()
    info.k = [math.nan] * 9
    assert runtime.on_camera_info(1, info, T0).input == "camera_info_1 (left)"
    # A corrupt JPEG is refused at arrival by the header check, naming the camera (not decoded there).
    assert all(p is None for p in feed(runtime, T0))
    corrupt = runtime.on_compressed_image(1, jpeg_msg(IMAGE, ns_to_stamp(T0), corrupt=True), T0)
    assert corrupt is not None and corrupt.input == "image_1 (left)" and "corrupt JPEG" in corrupt.reason
    # One whose headers are sound but whose data is damaged is reported by the planning cycle.
    damaged = jpeg_msg(IMAGE, ns_to_stamp(T0))  # nearer to the front stamp than the good one
    data = bytes(damaged.data)
    damaged.data = data[:300] + b"\xff\xd9"  # headers and an end marker, most of the scan missing
    assert runtime.on_compressed_image(1, damaged, T0) is None
    cycle = runtime.plan(T0 + 50 * NS_PER_MS)
    assert cycle.result is None and [p.input for p in cycle.problems] == ["image_1 (left)"]
    assert "corrupt JPEG" in cycle.problems[0].reason


def test_invalid_answer_publishes_no_path_but_a_trajectory() -> None:
    runtime = PlannerRuntime(config(), ScriptedEngine(), Clock())
    feed(runtime, T0, command="unknown")
    cycle = runtime.plan(T0 + 10 * NS_PER_MS)
    assert cycle.result is not None and not cycle.result.valid
    assert cycle.path is None
    if runtime.msgs is not None:
        assert not cycle.trajectory.valid and "unexpected text" in cycle.trajectory.invalid_reason
    assert all(m.action == m.DELETE for m in cycle.markers.markers)


def test_detection_and_vqa_cycles() -> None:
    runtime = PlannerRuntime(config(**{"detection.camera": "left"}), ScriptedEngine(), Clock())
    feed(runtime, T0)
    cycle = runtime.detect(T0 + 10 * NS_PER_MS, debug_image=True)
    assert cycle.result is not None and cycle.result.camera == "left"
    assert [m.ns for m in cycle.markers.markers] == [
        "wam_diff2/detections/left",
        "wam_diff2/detection_labels/left",
    ] * 2
    if runtime.msgs is not None:
        assert [d.label for d in cycle.detections.detections] == ["car", "pedestrian"]
        assert cycle.detections.header.frame_id == "left_optical" and cycle.detections.camera == "left"
    assert cycle.debug_image.header.frame_id == "left_optical"
    answer = runtime.answer("what do you see?", T0 + 10 * NS_PER_MS)
    assert answer.message.data == "I see 2 image(s), the first is 320x180."
    assert runtime.answer("   ", T0).problems[0].reason == "empty question"
    stale = runtime.answer("what now?", T0 + 10_000 * NS_PER_MS)
    assert stale.message is None and "old" in stale.problems[0].reason


def test_a_surround_rig_plans_on_its_planning_cameras_only() -> None:
    clock = Clock(T0 + 120 * NS_PER_MS)
    surround = config(**{"planning.cameras": ["front"], "prompt.template": "navsim"})
    runtime = PlannerRuntime(surround, ScriptedEngine(), clock)
    for k in range(51):  # odometry, a command and the front camera only: the left camera is silent
        stamp = T0 - (50 - k) * 20 * NS_PER_MS
        runtime.on_odometry(odometry(stamp, 6.0), stamp)
    runtime.on_command(String(data="left"), T0)
    runtime.on_image(0, rgb_image_msg(IMAGE, ns_to_stamp(T0)), T0)
    cycle = runtime.plan(clock.now)
    assert cycle.problems == () and cycle.result is not None and cycle.result.valid
    call = runtime.pipeline.engine.calls[-1]
    assert len(call["images"]) == 1 and call["prompt"].count("<image>") == 1
    # the question still goes with every VQA camera: without the left camera's image it says so
    answer = runtime.answer("what do you see?", T0 + 10 * NS_PER_MS)
    assert [p.input for p in answer.problems] == ["image_1 (left)"]


def test_same_inputs_give_byte_identical_outputs() -> None:
    """Two runtimes fed the same messages at the same times (a replay) produce the same messages."""

    def run() -> list[object]:
        clock = Clock(T0 + 80 * NS_PER_MS)
        runtime = PlannerRuntime(config(), ScriptedEngine(), clock)
        feed(runtime, T0, command="left", vx=3.3)
        cycle = runtime.plan(clock.now, debug_image=True)
        messages = [cycle.path, cycle.markers, cycle.debug_image] + ([cycle.trajectory] if cycle.trajectory else [])
        return messages

    # Message equality compares every field (serialised bytes are not comparable: CDR padding is not zeroed).
    first, second = run(), run()
    assert len(first) == len(second) >= 3
    for a, b in zip(first, second, strict=True):
        assert a == b
    assert first[2].data == second[2].data


def test_real_decoder_through_the_runtime() -> None:
    values = {"model.path": str(tiny_checkpoint()), "decoding.max_new_tokens": 32, "decoding.denoising_steps": 3}
    cfg = NodeConfig.from_parameters(values)
    from wam_diff2_ros.ros.node import load_engine

    engine = load_engine(NodeConfig.from_parameters({**values, "model.device": "cpu", "model.dtype": "float32"}))
    try:
        runtime = PlannerRuntime(cfg, engine, Clock(T0 + 300 * NS_PER_MS))
        for k in range(51):
            stamp = T0 - (50 - k) * 20 * NS_PER_MS
            runtime.on_odometry(odometry(stamp, 4.0), stamp)
        runtime.on_command(String(data="straight"), T0)
        runtime.on_image(0, rgb_image_msg(IMAGE, ns_to_stamp(T0)), T0)
        cycle = runtime.plan(T0 + 100 * NS_PER_MS)
        assert cycle.result is not None and not cycle.result.valid and cycle.result.reason
        assert cycle.path is None
        assert cycle.result.timing.total_ms > 0
    finally:
        engine.close()


# --- diagnostics ----------------------------------------------------------------------------------------------


def levels(array) -> dict[str, bytes]:
    return {status.name.split(": ")[1]: status.level for status in array.status}


def test_health_to_diagnostics() -> None:
    health = NodeHealth("wam_diff2", invalid_rate_window=4, recent_s=5.0)
    array = health.diagnostics(T0)
    assert levels(array) == {"model": WARN, "inputs": OK, "planning": WARN, "detection": OK}
    health.set_model("loaded", name="tiny", path="/ckpt", device="cpu", dtype="float32")
    health.set_lifecycle("active")
    health.register_inputs(["image_0 (front)", "odometry"])
    health.input_ok("odometry")
    health.input_dropped("image_0 (front)", "unsupported encoding 'weird8'", T0)
    health.plan_done(True, "", StageTiming(total_ms=12.0, end_to_end_ms=30.0), T0, T0)
    health.plan_done(False, "expected 16 numbers, got 3", StageTiming(), T0 + 1, T0)
    array = health.diagnostics(T0 + 2 * 1_000_000_000, {"image_0 (front)": 40.0, "odometry": None})
    statuses = {s.name: s for s in array.status}
    model = statuses["wam_diff2: model"]
    assert model.level == OK and model.message == "loaded tiny on cpu (float32)"
    inputs = statuses["wam_diff2: inputs"]
    assert inputs.level == WARN and "image_0 (front): unsupported encoding 'weird8'" in inputs.message
    values = {kv.key: kv.value for kv in inputs.values}
    assert values["image_0 (front) age_ms"] == "40" and values["odometry age_ms"] == "never received"
    assert values["image_0 (front) dropped"] == "1" and values["odometry received"] == "1"
    planning = statuses["wam_diff2: planning"]
    assert planning.level == WARN and "invalid model answer: expected 16 numbers, got 3" in planning.message
    values = {kv.key: kv.value for kv in planning.values}
    assert values["invalid_answer_rate"] == "0.50" and values["last_plan_age_s"] == "2.00"
    # An old drop no longer warns; an engine error is an ERROR.
    later = health.diagnostics(T0 + 60 * 1_000_000_000)
    assert levels(later)["inputs"] == OK
    health.plan_error("RuntimeError: CUDA out of memory", T0)
    assert levels(health.diagnostics(T0))["planning"] == ERROR
    health.plan_blocked([InputProblem("odometry", "nearest odometry is -900 ms from the front image")], T0)
    status = {s.name: s for s in health.diagnostics(T0).status}["wam_diff2: planning"]
    assert (
        status.level == WARN
        and status.message == "no result: odometry: nearest odometry is -900 ms from the front image"
    )
    health.set_model("failed", error="cannot load '/x': not a directory")
    assert levels(health.diagnostics(T0))["model"] == ERROR


def test_keyed_throttle() -> None:
    throttle = KeyedThrottle(5.0)
    assert throttle.allow("a", T0) and not throttle.allow("a", T0 + 4 * 10**9) and throttle.allow("b", T0)
    assert throttle.allow("a", T0 + 5 * 10**9)
