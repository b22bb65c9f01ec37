"""Plans a controller can trust, without DDS: the fixed-frame plan, the publish-time age gate, stale
commands, problem kinds for throttling, compressed headers checked at arrival (``ros.runtime`` with the
scripted engine, ``core.frames``, ``core.image_headers``, ``ros.diagnostics``)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from nav_msgs.msg import Odometry
from node_helpers import jpeg_msg, rgb_image_msg
from PIL import Image as PILImage
from scripted_engine import ScriptedEngine, scripted_plan
from std_msgs.msg import String

from wam_diff2_ros.core.frames import EgoPose, pose_at, transform_waypoints, yaw_from_quaternion
from wam_diff2_ros.core.image_headers import compressed_header_problem
from wam_diff2_ros.core.parsing import Waypoint
from wam_diff2_ros.core.samples import InputProblem, OdometrySample, problem_kind
from wam_diff2_ros.core.units import NS_PER_MS, NS_PER_S
from wam_diff2_ros.ros.conversions import ns_to_stamp, stamp_to_ns
from wam_diff2_ros.ros.diagnostics import WARN, KeyedThrottle, NodeHealth
from wam_diff2_ros.ros.params import NodeConfig
from wam_diff2_ros.ros.runtime import PlannerRuntime

pytestmark = pytest.mark.ros

T0 = 1_700_000_000 * NS_PER_S
IMAGE = np.random.default_rng(7).integers(0, 256, size=(180, 320, 3), dtype=np.uint8)
SPEED = 6.0
EGO = (10.0, 5.0, math.pi / 2)  # ego at the image stamp in odom: (10 m, 5 m), yaw 90°


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class SlowEngine(ScriptedEngine):
    """The scripted engine on a clock that advances ``seconds`` per planning answer (a slow model)."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def generate(self, prompt, images=(), decode=None, system=None):
        self.clock.now += round(self.seconds * NS_PER_S)
        return super().generate(prompt, images, decode, system)


def make_config(tmp_path, **overrides) -> NodeConfig:
    return NodeConfig.from_parameters({"model.path": str(tmp_path), "command.default": "", **overrides})


def odometry(stamp_ns: int, frame_id: str = "odom") -> Odometry:
    """The ego driving along odom +y (yaw 90°) at SPEED, at EGO at T0."""
    x, y, yaw = EGO
    seconds = (stamp_ns - T0) / NS_PER_S
    msg = Odometry()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = frame_id
    msg.child_frame_id = "base_link"
    msg.pose.pose.position.x = x
    msg.pose.pose.position.y = y + SPEED * seconds
    msg.pose.pose.position.z = 0.3
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    msg.twist.twist.linear.x = SPEED
    return msg


def feed(runtime: PlannerRuntime, image_ns: int, command_ns: int | None = None, frame_id: str = "odom") -> None:
    """50 Hz odometry for the second up to 10 ms past the image (the image stamp lies between two samples)."""
    for k in range(51):
        stamp = image_ns + 10 * NS_PER_MS - (50 - k) * 20 * NS_PER_MS
        assert runtime.on_odometry(odometry(stamp, frame_id), stamp) is None
    assert runtime.on_command(String(data="straight"), image_ns if command_ns is None else command_ns) is None
    assert runtime.on_image(0, rgb_image_msg(IMAGE, ns_to_stamp(image_ns)), image_ns) is None


def expected_fixed(x: float, y: float) -> tuple[float, float]:
    """A base_link point at T0 in odom, written out for yaw 90°: (x, y) → (X − y, Y + x)."""
    return EGO[0] - y, EGO[1] + x


# --- fixed frame


def test_fixed_frame_plan_is_transformed_by_the_interpolated_ego_pose(tmp_path) -> None:
    runtime = PlannerRuntime(make_config(tmp_path), ScriptedEngine(), clock=Clock(T0 + 50 * NS_PER_MS))
    feed(runtime, T0)
    cycle = runtime.plan(T0 + 50 * NS_PER_MS)
    assert cycle.result is not None and cycle.result.valid, cycle.problems
    pose = cycle.result.observation.ego_pose
    assert pose == EgoPose("odom", pytest.approx(10.0), pytest.approx(5.0), pytest.approx(0.3), pytest.approx(EGO[2]))
    base = scripted_plan("straight", SPEED)
    assert cycle.path.header.frame_id == "base_link"
    fixed = cycle.path_fixed
    assert fixed.header.frame_id == "odom" and stamp_to_ns(fixed.header.stamp) == T0
    assert len(fixed.poses) == 8
    for i, (stamped, (x, y)) in enumerate(zip(fixed.poses, base, strict=True)):
        assert stamped.header.frame_id == "odom"
        assert stamp_to_ns(stamped.header.stamp) == T0 + (i + 1) * 500 * NS_PER_MS
        assert (stamped.pose.position.x, stamped.pose.position.y) == pytest.approx(expected_fixed(x, y), abs=0.01)
        assert stamped.pose.position.z == pytest.approx(0.3)
        yaw = 2 * math.atan2(stamped.pose.orientation.z, stamped.pose.orientation.w)
        assert yaw == pytest.approx(EGO[2], abs=1e-6)  # straight ahead = the ego's heading
    trajectory = cycle.trajectory_fixed
    assert trajectory.valid and trajectory.header.frame_id == "odom"
    assert [(p.pose.position.x, p.pose.position.y) for p in trajectory.points] == [
        (p.pose.position.x, p.pose.position.y) for p in fixed.poses
    ]
    assert [p.longitudinal_velocity_mps for p in trajectory.points] == pytest.approx(
        [p.longitudinal_velocity_mps for p in cycle.trajectory.points]
    )


def test_planning_frame_id_selects_a_transformed_path_never_a_relabel(tmp_path) -> None:
    runtime = PlannerRuntime(make_config(tmp_path, **{"planning.frame_id": "odom"}), ScriptedEngine(), Clock(T0))
    feed(runtime, T0)
    cycle = runtime.plan(T0)
    assert cycle.path.header.frame_id == "odom"
    assert [(p.pose.position.x, p.pose.position.y) for p in cycle.path.poses] == [
        (p.pose.position.x, p.pose.position.y) for p in cycle.path_fixed.poses
    ]
    assert cycle.trajectory.header.frame_id == "odom" and cycle.trajectory.valid
    line = next(m for m in cycle.markers.markers if m.ns == "wam_diff2/path")
    assert line.header.frame_id == "odom" and (line.points[0].x, line.points[0].y) == pytest.approx(EGO[:2])

    # A frame the odometry is not in: no Path on ~/output/path (and no relabelled points), the fixed one stays.
    runtime = PlannerRuntime(make_config(tmp_path, **{"planning.frame_id": "map"}), ScriptedEngine(), Clock(T0))
    feed(runtime, T0)
    cycle = runtime.plan(T0)
    assert cycle.path is None and cycle.path_fixed is not None and cycle.path_fixed.header.frame_id == "odom"
    assert not cycle.trajectory.valid and "planning.frame_id is 'map'" in cycle.trajectory.invalid_reason
    assert "odometry in 'odom'" in cycle.frame_problem


def test_odometry_without_a_frame_gives_no_fixed_plan(tmp_path) -> None:
    runtime = PlannerRuntime(make_config(tmp_path), ScriptedEngine(), Clock(T0))
    feed(runtime, T0, frame_id="")
    cycle = runtime.plan(T0)
    assert cycle.result.valid and cycle.path is not None
    assert cycle.path_fixed is None and not cycle.trajectory_fixed.valid
    assert "no fixed-frame plan: odometry has no pose" in cycle.frame_problem


def test_pose_interpolation_and_extrapolation() -> None:
    def sample(stamp_ns: int, x: float, yaw: float, vx: float = 2.0, yaw_rate: float = 0.0) -> OdometrySample:
        return OdometrySample(stamp_ns, stamp_ns, vx, 0.0, yaw_rate, EgoPose("map", x, 0.0, 0.0, yaw))

    samples = [sample(0, 0.0, math.radians(170)), sample(100 * NS_PER_MS, 0.2, math.radians(-170))]
    pose, problem = pose_at(samples, 50 * NS_PER_MS, 100 * NS_PER_MS)
    assert problem == "" and pose.x == pytest.approx(0.1)
    assert abs(pose.yaw) == pytest.approx(math.pi)  # across ±180° the short way, not through 0
    ahead, _ = pose_at([sample(0, 1.0, 0.0, vx=2.0, yaw_rate=0.5)], 40 * NS_PER_MS, 100 * NS_PER_MS)
    assert (ahead.x, ahead.yaw) == (pytest.approx(1.08), pytest.approx(0.02))
    missing, problem = pose_at(samples, 400 * NS_PER_MS, 100 * NS_PER_MS)
    assert missing is None and "+300 ms from the image" in problem
    assert yaw_from_quaternion(0.0, 0.0, 0.0, 0.0) is None
    moved = transform_waypoints([Waypoint(0.5, 1.0, 0.0, 0.0)], EgoPose("odom", *EGO[:2], 0.0, EGO[2]))
    assert (moved[0].x, moved[0].y, moved[0].yaw) == pytest.approx((10.0, 6.0, EGO[2]))


# --- age gate


def test_a_plan_older_than_max_plan_age_is_published_as_stale(tmp_path) -> None:
    clock = Clock(T0)
    config = make_config(tmp_path, **{"planning.max_plan_age_s": 1.0})
    runtime = PlannerRuntime(config, SlowEngine(clock, 2.5), clock)
    feed(runtime, T0)
    cycle = runtime.plan(T0)
    assert cycle.stale and cycle.result is not None and not cycle.result.valid
    assert cycle.result.reason.startswith("stale plan: 2.50 s old when ready (planning.max_plan_age_s 1 s)")
    assert cycle.path is None and cycle.path_fixed is None
    assert not cycle.trajectory.valid and "stale plan: 2.50 s" in cycle.trajectory.invalid_reason
    assert cycle.trajectory.points == [] and not cycle.trajectory_fixed.valid
    assert all(m.action == m.DELETE for m in cycle.markers.markers)

    fast = PlannerRuntime(config, SlowEngine(Clock(T0), 0.5), Clock(T0))  # its own clock: 0 s old
    feed(fast, T0)
    assert fast.plan(T0).path is not None


def test_stale_plan_is_a_warn_but_not_an_invalid_answer() -> None:
    from wam_diff2_ros.core.planning import StageTiming

    health = NodeHealth("n")
    health.plan_withheld("stale plan: 14.70 s old when ready (planning.max_plan_age_s 2 s)", StageTiming(), T0, T0)
    status = {s.name: s for s in health.diagnostics(T0).status}["n: planning"]
    assert status.level == WARN and status.message.startswith("stale plan: 14.70 s")
    assert health.invalid_rate == 0.0


# --- commands


def test_a_command_older_than_the_default_age_blocks_planning(tmp_path) -> None:
    config = make_config(tmp_path)
    assert config.sync.command_max_age_s == 3.0
    runtime = PlannerRuntime(config, ScriptedEngine(), Clock(T0))
    feed(runtime, T0, command_ns=T0 - 2 * NS_PER_S)  # a 1 Hz topic that lost a message: still fine
    assert runtime.plan(T0).result is not None
    runtime = PlannerRuntime(config, ScriptedEngine(), Clock(T0))
    feed(runtime, T0, command_ns=T0 - 4 * NS_PER_S)  # the topic died 4 s ago
    cycle = runtime.plan(T0)
    assert cycle.result is None
    assert [str(p) for p in cycle.problems] == [
        "command: latest command is 4.0 s old (limit 3 s) (set command.default to plan without one)"
    ]
    unknown = runtime.on_command(String(data="sideways"), T0)  # a diagnostic, and the old command is kept
    assert unknown is not None and unknown.input == "command" and "unknown navigation command" in unknown.reason


# --- throttling keys


def test_problem_kinds_ignore_numbers_quotes_and_object_reprs() -> None:
    a = InputProblem("image_0 (front)", "newest image is 24354 ms old (limit 500 ms)")
    b = InputProblem("image_0 (front)", "newest image is -744 ms old (limit 500 ms)")
    assert a.kind == b.kind and str(a) != str(b)
    assert a.kind != InputProblem("image_1 (left)", b.reason).kind  # the input is part of the kind
    leaky = InputProblem(
        "image_1 (left)", "corrupt JPEG data (cannot identify image file <_io.BytesIO object at 0x7ff6a>)"
    )
    assert "object at" not in leaky.reason and "0x7ff6a" not in str(leaky)
    assert problem_kind("unknown navigation command 'x'") == problem_kind("unknown navigation command 'yy'")


def test_keyed_throttle_allows_one_message_per_kind_and_period() -> None:
    throttle = KeyedThrottle(1.0, max_keys=3)
    reasons = [f"nearest odometry is {-1000 - k} ms from the front image (limit ±100 ms)" for k in range(40)]
    allowed = [
        throttle.allow(InputProblem("odometry", reason).kind, T0 + k * 100 * NS_PER_MS)
        for k, reason in enumerate(reasons)
    ]
    assert allowed.count(True) == 4 and [i for i, a in enumerate(allowed) if a] == [0, 10, 20, 30]
    for k in range(10):
        throttle.allow(f"kind {k}", T0)
    assert len(throttle) == 3  # bounded


# --- compressed headers at arrival


def _jpeg(rgb: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    PILImage.fromarray(rgb).save(buffer, "JPEG", quality=80)
    return buffer.getvalue()


def test_compressed_headers_are_checked_at_arrival(tmp_path) -> None:
    data = _jpeg(IMAGE)
    assert compressed_header_problem(data) is None
    assert compressed_header_problem(data + b"\x00" * 16) is None  # zero padding after EOI
    assert compressed_header_problem(data[: len(data) // 2]).startswith("truncated JPEG: no end-of-image marker")
    assert compressed_header_problem(data[:20] + bytes(range(256)) * 8).startswith("corrupt JPEG: expected a marker")
    assert compressed_header_problem(data, max_pixels=1000) == "image of 320x180 exceeds 1000 pixels"
    png = io.BytesIO()
    PILImage.fromarray(IMAGE).save(png, "PNG")
    assert compressed_header_problem(png.getvalue()) is None
    assert compressed_header_problem(png.getvalue()[:-12]).startswith("truncated PNG")
    assert compressed_header_problem(b"GIF89a....").startswith("data is neither JPEG nor PNG")

    config = make_config(tmp_path, **{"cameras.names": ["front"], "cameras.transports": ["compressed"]})
    runtime = PlannerRuntime(config, ScriptedEngine(), Clock(T0))
    truncated = jpeg_msg(IMAGE, ns_to_stamp(T0))
    truncated.data = data[: len(data) - 100]
    problem = runtime.on_compressed_image(0, truncated, T0)
    assert problem is not None and problem.input == "image_0 (front)" and "truncated JPEG" in problem.reason
    assert runtime.buffer.latest_stamp(0) is None  # never stored
    assert runtime.on_compressed_image(0, jpeg_msg(IMAGE, ns_to_stamp(T0)), T0) is None


# --- confidence gate and the published confidence


class ConfidentEngine(ScriptedEngine):
    """The scripted engine whose answers come with one token per character, each won with probability 0.95,
    except the characters of waypoint 3's numbers (the 5th and 6th): ``low``."""

    def __init__(self, low: float) -> None:
        super().__init__()
        self.low = low

    def generate(self, prompt, images=(), decode=None, system=None, started_ns=None):
        generation = super().generate(prompt, images, decode, system)
        text = generation.text
        starts = [0] + [i + 2 for i, c in enumerate(text) if c == ","]  # numbers are separated by ", "
        start = starts[4]
        end = text.index(",", starts[5])
        generation.token_confidence = [self.low if start <= i < end else 0.95 for i in range(len(text))]
        generation.token_spans = lambda: [(i, i + 1) for i in range(len(text))]
        return generation


def test_every_waypoint_carries_its_confidence(tmp_path) -> None:
    clock = Clock(T0)
    runtime = PlannerRuntime(make_config(tmp_path), ConfidentEngine(low=0.1), clock)
    feed(runtime, T0)
    cycle = runtime.plan(T0)
    assert cycle.path is not None and not cycle.unsure
    trajectory = cycle.trajectory
    assert trajectory.valid and len(trajectory.waypoint_confidence) == 8
    assert list(trajectory.waypoint_confidence) == pytest.approx([0.95, 0.95, 0.1, 0.95, 0.95, 0.95, 0.95, 0.95])
    assert trajectory.confidence == pytest.approx(0.1)
    assert trajectory.deadline_ms == 0.0 and trajectory.deadline_met and trajectory.early_tokens == 0
    spheres = [m for m in cycle.markers.markers if m.type == m.SPHERE]
    assert spheres[2].color.r > 0.8 and spheres[2].color.g < 0.5  # unsure: red
    assert spheres[0].color.g > 0.8 and spheres[0].color.r < 0.5  # sure: green


def test_a_plan_below_min_confidence_is_withheld_with_its_reason(tmp_path) -> None:
    config = make_config(tmp_path, **{"planning.min_confidence": 0.5})
    runtime = PlannerRuntime(config, ConfidentEngine(low=0.3), Clock(T0))
    feed(runtime, T0)
    cycle = runtime.plan(T0)
    assert cycle.unsure and cycle.path is None and cycle.path_fixed is None
    assert cycle.withheld == "low confidence: 0.300 below planning.min_confidence 0.5"
    assert not cycle.trajectory.valid and cycle.trajectory.invalid_reason == cycle.withheld
    assert cycle.trajectory.confidence == pytest.approx(0.3) and cycle.trajectory.points == []
    assert all(m.action == m.DELETE for m in cycle.markers.markers)

    sure = PlannerRuntime(config, ConfidentEngine(low=0.7), Clock(T0))
    feed(sure, T0)
    assert sure.plan(T0).path is not None


def test_min_confidence_is_a_parameter_in_range(tmp_path) -> None:
    from wam_diff2_ros.ros.params import ParameterError

    with pytest.raises(ParameterError, match=r"planning\.min_confidence"):
        make_config(tmp_path, **{"planning.min_confidence": 1.5})
    with pytest.raises(ParameterError, match=r"decoding\.deadline_ms"):
        make_config(tmp_path, **{"decoding.deadline_ms": -1.0})
    assert make_config(tmp_path, **{"decoding.deadline_ms": 250.0}).decode.deadline_ms == 250.0


def test_the_debug_image_colours_waypoints_by_confidence() -> None:
    from wam_diff2_ros.ros.debug_image import draw_debug_image

    rgb = np.zeros((240, 320, 3), np.uint8)
    points = [(2.0 * (k + 1), 0.0) for k in range(8)]

    def red_pixels(confidence: float) -> int:
        picture = draw_debug_image(rgb, waypoints_xy=points, waypoint_confidence=[confidence] * 8)
        r, g, b = (picture[..., i].astype(int) for i in range(3))
        return int(((r > 200) & (g < 90) & (b < 90)).sum())

    assert red_pixels(0.0) > 20 and red_pixels(1.0) == 0


# --- a rejected plan stays in the records


WRONG_DIGIT = "3.00, 0.00, 6.00, 0.00, 9.00, 0.00, 12.00, 0.00, 15.00, 0.00, 18.00, 0.00, 21.00, 0.00, 14.00, 0.00"


class WrongDigitEngine(ConfidentEngine):
    """Answers a plan whose last x falls back by 7 m (a wrong tens digit), its characters won with ``low``."""

    def generate(self, prompt, images=(), decode=None, system=None, started_ns=None):
        generation = super().generate(prompt, images, decode, system)
        generation.text = text = WRONG_DIGIT
        start = text.rindex("14.00")
        generation.token_confidence = [self.low if i >= start else 0.95 for i in range(len(text))]
        generation.token_spans = lambda: [(i, i + 1) for i in range(len(text))]
        return generation


def test_a_rejected_plan_keeps_its_waypoints_and_confidence_in_records_and_view(tmp_path) -> None:
    from wam_diff2_ros.replay.records import plan_record
    from wam_diff2_ros.viewer.scene import STATUS_COLORS, PlanUpdate, view_frame

    runtime = PlannerRuntime(make_config(tmp_path), WrongDigitEngine(low=0.4), Clock(T0))
    feed(runtime, T0)
    cycle = runtime.plan(T0)
    result = cycle.result
    assert not result.valid and "backward" in result.reason and cycle.path is None
    assert result.waypoints == ()
    assert [(w.x, w.y) for w in result.rejected_waypoints][-2:] == [(21.0, 0.0), (14.0, 0.0)]
    assert result.confidence == pytest.approx(0.4) and len(result.waypoint_confidence) == 8
    record = plan_record(0, T0, T0, cycle, 1.0)
    assert record["valid"] is False and record["waypoints"] is None
    assert record["rejected_waypoints"][-1] == [14.0, 0.0] and record["confidence"] == pytest.approx(0.4)
    assert len(record["waypoint_token_probabilities"]) == 8
    frame = view_frame(PlanUpdate(now_ns=T0, result=result))
    assert frame.status == "rejected" and frame.waypoints[-1] == (14.0, 0.0)
    assert set(frame.colors) == {STATUS_COLORS["rejected"]}
    assert frame.info["confidence"] == pytest.approx(0.4) and frame.info["waypoints"][-1] == [14.0, 0.0]


def test_a_plan_withheld_for_low_confidence_keeps_its_waypoints_as_rejected(tmp_path) -> None:
    config = make_config(tmp_path, **{"planning.min_confidence": 0.5})
    runtime = PlannerRuntime(config, ConfidentEngine(low=0.3), Clock(T0))
    feed(runtime, T0)
    result = runtime.plan(T0).result
    assert not result.valid and result.waypoints == () and len(result.rejected_waypoints) == 8
