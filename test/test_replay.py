"""``wam-diff2-replay``: real bags (rosbag2 MCAP written with the package's BagWriter, the synthetic sample drive,
sqlite3), the node's real :class:`PlannerRuntime`, the real decoder with the tiny random checkpoint, and a scripted
engine with known answers where the metrics must come out exactly.

Covers: sample bag end to end (outputs, output bag topics/types/counts/stamps, predictions fields, determinism);
ADE/FDE/invalid rate/latency against hand-computed values on straight and constant-radius drives; topic
auto-detection and flag mapping on bags with other names, image sizes and transports; the replayed window;
detection; a truncated bag; a bag without odometry; bad command lines.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from core_helpers import tiny_checkpoint

from wam_diff2_ros import replay as replay_tool
from wam_diff2_ros.bag import BagReader, BagWriter
from wam_diff2_ros.cli.replay import main
from wam_diff2_ros.replay import (
    EXIT_BAG_DAMAGED,
    EXIT_FAILED,
    EXIT_NO_PLANS,
    EXIT_OK,
    EXIT_USAGE,
    InstantSchedule,
    ReplayOptions,
    TopicRequest,
    replay,
)

T0 = 1_700_000_000 * 10**9
NS = 10**9
FAST = ["--set", "decoding.max_new_tokens=32", "--set", "decoding.denoising_steps=4"]
WAYPOINT_TIMES = [0.5 * (i + 1) for i in range(8)]


# --- bags -----------------------------------------------------------------------------------------------


def _time(stamp_ns: int) -> Any:
    from builtin_interfaces.msg import Time

    return Time(sec=stamp_ns // NS, nanosec=stamp_ns % NS)


def odometry_msg(stamp_ns: int, x: float, y: float, yaw: float, vx: float, yaw_rate: float) -> Any:
    from nav_msgs.msg import Odometry

    msg = Odometry()
    msg.header.stamp = _time(stamp_ns)
    msg.header.frame_id, msg.child_frame_id = "odom", "base_link"
    msg.pose.pose.position.x, msg.pose.pose.position.y = float(x), float(y)
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    msg.twist.twist.linear.x = float(vx)
    msg.twist.twist.angular.z = float(yaw_rate)
    return msg


def image_msg(stamp_ns: int, width: int, height: int, compressed: bool, seed: int = 0) -> Any:
    import io

    from PIL import Image as PILImage
    from sensor_msgs.msg import CompressedImage, Image

    rgb = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    if compressed:
        buffer = io.BytesIO()
        PILImage.fromarray(rgb).save(buffer, "JPEG", quality=80)
        msg = CompressedImage(format="jpeg", data=buffer.getvalue())
    else:
        msg = Image(height=height, width=width, encoding="rgb8", step=width * 3, data=rgb.tobytes())
    msg.header.stamp = _time(stamp_ns)
    msg.header.frame_id = "cam_optical"
    return msg


def straight(speed: float, heading: float = 0.7, origin: tuple[float, float] = (100.0, -50.0)):
    """Constant speed along a straight line in a rotated, shifted odom frame: pose(t) and twist."""

    def pose(t: float) -> tuple[float, float, float, float, float]:
        return origin[0] + speed * t * math.cos(heading), origin[1] + speed * t * math.sin(heading), heading, speed, 0.0

    return pose


def circle(speed: float, radius: float, heading0: float = -0.4, centre: tuple[float, float] = (30.0, 10.0)):
    """Constant speed on a left-turning circle of ``radius``: pose(t) and twist."""
    rate = speed / radius

    def pose(t: float) -> tuple[float, float, float, float, float]:
        psi = heading0 + rate * t
        return centre[0] + radius * math.sin(psi), centre[1] - radius * math.cos(psi), psi, speed, rate

    return pose


def write_drive_bag(
    path: Path,
    pose_fn: Any,
    *,
    seconds: float = 8.0,
    image_times: list[float] | None = None,
    image_topic: str = "/cam/image_raw",
    compressed: bool = False,
    size: tuple[int, int] = (64, 48),
    odometry_topic: str | None = "/odom",
    command_topic: str = "/route/command",
    command: str = "straight",
    extra: list[tuple[str, str, Any]] | None = None,
    more_cameras: list[tuple[str, bool, tuple[int, int]]] | None = None,
) -> Path:
    """A bag with 50 Hz odometry (stamps on 20 ms ticks), images at ``image_times`` (s), one command at t=0 and
    ``extra`` messages at 0.1 s."""
    from std_msgs.msg import String

    image_times = image_times if image_times is not None else [0.5 * k for k in range(1, 13)]
    events: list[tuple[int, int, str, Any]] = []
    if odometry_topic:
        for k in range(round(seconds * 50) + 1):
            stamp = T0 + k * 20_000_000
            events.append((stamp, 0, odometry_topic, odometry_msg(stamp, *pose_fn(k * 0.02))))
    events.append((T0, 1, command_topic, String(data=command)))
    for i, t in enumerate(image_times):
        stamp = T0 + round(t * NS)
        events.append((stamp, 2, image_topic, image_msg(stamp, *size, compressed, seed=i)))
        for topic, more_compressed, more_size in more_cameras or []:
            events.append((stamp, 2, topic, image_msg(stamp, *more_size, more_compressed, seed=100 + i)))
    for topic, _, msg in extra or []:
        events.append((T0 + 100_000_000, 3, topic, msg))
    events.sort(key=lambda e: (e[0], e[1]))
    with BagWriter(path) as bag:
        if odometry_topic:
            bag.add_topic(odometry_topic, "nav_msgs/msg/Odometry")
        bag.add_topic(command_topic, "std_msgs/msg/String")
        bag.add_topic(image_topic, "sensor_msgs/msg/CompressedImage" if compressed else "sensor_msgs/msg/Image")
        for topic, msgtype, _ in extra or []:
            bag.add_topic(topic, msgtype)
        for topic, more_compressed, _ in more_cameras or []:
            bag.add_topic(topic, "sensor_msgs/msg/CompressedImage" if more_compressed else "sensor_msgs/msg/Image")
        for stamp, _, topic, msg in events:
            bag.write(topic, msg, stamp)
    return path


# --- engines ----------------------------------------------------------------------------------------------


@dataclass
class KnownTiming:
    total_s: float
    preprocess_s: float = 0.0
    vision_s: float = 0.0
    prefill_s: float = 0.0
    denoise_s: float = 0.0
    commit_s: float = 0.0


@dataclass
class KnownGeneration:
    text: str
    timing: KnownTiming
    steps_per_block: list[int] = field(default_factory=lambda: [2])
    finished: bool = True


class KnownAnswerEngine:
    """Answers every planning prompt with the straight line x = 5 t, y = 0 (8 waypoints); every ``invalid_every``-th
    call answers text that is not a plan. Call k (1-based) reports a total inference time of 0.1 k s."""

    name = "known-answers"
    device = "cpu"
    dtype = "float32"

    def __init__(self, config: Any = None, invalid_every: int = 4) -> None:
        self.calls: list[str] = []
        self.image_shapes: list[list[tuple[int, ...]]] = []
        self.invalid_every = invalid_every

    def generate(self, prompt: str, images: Any = (), decode: Any = None, system: Any = None) -> KnownGeneration:
        self.calls.append(prompt)
        self.image_shapes.append([tuple(np.asarray(image).shape) for image in images])
        k = len(self.calls)
        timing = KnownTiming(total_s=0.1 * k)
        if self.invalid_every and k % self.invalid_every == 0:
            return KnownGeneration("no idea where to go", timing)
        return KnownGeneration(", ".join(f"{5.0 * t:.2f}, 0.00" for t in WAYPOINT_TIMES), timing)


# --- helpers ------------------------------------------------------------------------------------------------


def read_predictions(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]


def read_metrics(out: Path) -> dict[str, Any]:
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def without_timing(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "timing"} for r in records]


def bag_messages(path: Path) -> dict[str, list[Any]]:
    by_topic: dict[str, list[Any]] = {}
    with BagReader(path) as reader:
        for message in reader.messages():
            by_topic.setdefault(message.topic, []).append(message)
    return by_topic


def known_replay(bag: Path, out: Path, engine: Any | None = None, **kwargs: Any):
    options = ReplayOptions(bag=bag, out=out, model=str(out.parent), progress=False, **kwargs)
    # These bags carry one command at t=0 (like a latched route command): it must not expire.
    options.overrides = {"planning.rate_hz": 0.0, "command.max_age_s": 0.0, **options.overrides}
    engine = engine or KnownAnswerEngine()
    return replay(options, engine_factory=lambda config: engine, log=lambda text: None), engine


@pytest.fixture(scope="module")
def sample_bag(tmp_path_factory) -> Path:
    from wam_diff2_ros.sim import make_sample_bag

    return make_sample_bag(tmp_path_factory.mktemp("sample") / "drive", seconds=4.0, width=320, height=180).path


@pytest.fixture(scope="module")
def tiny() -> Path:
    return tiny_checkpoint()


@pytest.fixture(scope="module")
def sample_replay(sample_bag, tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "run"
    code = main([str(sample_bag), "--out", str(out), "--model", str(tiny), *FAST])
    return code, out


# --- the sample bag end to end -------------------------------------------------------------------------------


def test_sample_bag_outputs_exist(sample_replay) -> None:
    code, out = sample_replay
    assert code == EXIT_OK
    for name in ("out/metadata.yaml", "out/out.mcap", "predictions.jsonl", "metrics.json", "summary.txt"):
        assert (out / name).is_file(), name
    for name in ("plots/bev.png", "plots/error_over_horizon.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_sample_bag_predictions(sample_replay, sample_bag) -> None:
    _, out = sample_replay
    records = read_predictions(out)
    # planning.rate_hz 2 on the bag clock from its start (the first instant one period in); the bag's last
    # message is at 3.98 s, so instants 0.5 .. 3.5 s.
    assert [r["t_ns"] for r in records] == [T0 + k * NS // 2 for k in range(1, 8)]
    with BagReader(sample_bag) as reader:
        image_stamps = [m.stamp_ns for m in reader.messages(["/camera/front/image_raw/compressed"])]
    for record in records:
        assert record["status"] == "planned"
        # the plan is made on the newest front image received at the instant
        assert record["stamp_ns"] == max(s for s in image_stamps if s <= record["t_ns"])
        assert record["prompt"].startswith("Here is a front-view images from a driving vehicle: <image>")
        assert "The navigation information is: straight" in record["prompt"]
        assert f"velocity is: ({record['velocity'][0]:.2f},{record['velocity'][1]:.2f})" in record["prompt"]
        assert record["raw_text"]
        assert record["valid"] is False and record["waypoints"] is None and record["reason"]
        assert record["acceleration_source"] == "topic" and record["command_source"] == "topic"
        assert record["timing"]["total_ms"] > 0
        # on the bag clock the outputs are built at the tick: the gap from the image to the tick, no model time
        assert "end_to_end_ms" not in record["timing"]
        assert record["timing"]["schedule_delay_ms"] == pytest.approx((record["t_ns"] - record["stamp_ns"]) / 1e6)
    metrics = read_metrics(out)
    assert metrics["num_instants"] == 7 and metrics["invalid_rate"] == 1.0
    assert metrics["latency_ms"]["count"] == 7 and metrics["latency_ms"]["max"] > 0
    assert metrics["ground_truth"]["available"] is True
    assert metrics["run"]["model"] == Path(metrics["run"]["model_path"]).name
    assert metrics["run"]["topics"]["images"] == [
        {"topic": "/camera/front/image_raw/compressed", "transport": "compressed"}
    ]
    assert metrics["run"]["dtype"] == "float32"  # CPU default
    summary = (out / "summary.txt").read_text()
    assert "7 planned (0 valid, 7 invalid" in summary and str(out / "out") in summary


def test_sample_bag_output_bag(sample_replay, sample_bag) -> None:
    from wam_diff2_ros.ros.conversions import stamp_to_ns

    _, out = sample_replay
    records = read_predictions(out)
    with BagReader(out / "out") as reader:
        topics = {name: (info.msgtype, info.count) for name, info in reader.topics.items()}
    with BagReader(sample_bag) as source:
        source_counts = {name: info.count for name, info in source.topics.items()}
    assert topics["/wam_diff2/output/trajectory"] == ("wam_diff2_ros/msg/PlannedTrajectory", 7)
    assert topics["/wam_diff2/output/markers"] == ("visualization_msgs/msg/MarkerArray", 7)
    assert topics["/wam_diff2/debug/image"] == ("sensor_msgs/msg/Image", 7)
    assert topics["/wam_diff2/output/path"] == ("nav_msgs/msg/Path", 0)  # no valid plan, no Path (as the node)
    for topic, count in source_counts.items():  # the inputs are copied, so one bag shows camera and plan
        assert topics[topic][1] == count, topic
    messages = bag_messages(out / "out")
    trajectories = messages["/wam_diff2/output/trajectory"]
    assert [m.stamp_ns for m in trajectories] == [r["t_ns"] for r in records]  # the bag's timeline
    for message, record in zip(trajectories, records, strict=True):
        assert stamp_to_ns(message.msg.header.stamp) == record["stamp_ns"]  # stamp of the source image
        assert message.msg.header.frame_id == "base_link"
        assert message.msg.raw_text == record["raw_text"] and message.msg.prompt == record["prompt"]
        assert message.msg.valid is False and message.msg.invalid_reason == record["reason"]
    debug = messages["/wam_diff2/debug/image"][0].msg
    assert (debug.width, debug.height, debug.encoding) == (320, 180, "rgb8")
    markers = messages["/wam_diff2/output/markers"][0].msg.markers
    assert markers and all(m.action == m.DELETE for m in markers)  # invalid plan: the old path is removed


def test_sample_bag_replay_is_deterministic(sample_replay, sample_bag, tiny, tmp_path) -> None:
    _, out = sample_replay
    again = tmp_path / "again"
    assert main([str(sample_bag), "--out", str(again), "--model", str(tiny), *FAST, "--max-plans", "3"]) == 0
    first, second = read_predictions(out)[:3], read_predictions(again)
    assert len(second) == 3
    assert without_timing(second) == without_timing(first)


def test_sample_bag_plans_are_the_same_with_either_engine(sample_bag, tmp_path) -> None:
    runs = {}
    for engine in ("exact", "fast"):
        out = tmp_path / engine
        argv = [str(sample_bag), "--out", str(out), "--model", "demo", "--max-plans", "3", "--no-plots"]
        assert main([*argv, "--no-copy-inputs", "--set", f"decoding.engine={engine}"]) == EXIT_OK
        runs[engine] = read_predictions(out), read_metrics(out)["run"]["decoding_engine"]
    (exact, exact_engine), (fast, fast_engine) = runs["exact"], runs["fast"]
    assert len(exact) == 3 and any(r["valid"] for r in exact)  # real plans are compared
    assert without_timing(fast) == without_timing(exact)
    assert (exact_engine, fast_engine) == ("exact (decoding.engine: exact)", "fast (decoding.engine: fast)")


# --- metrics against known futures ----------------------------------------------------------------------------


def test_metrics_on_a_straight_drive_are_exact(tmp_path: Path) -> None:
    bag = write_drive_bag(tmp_path / "straight", straight(4.0))
    result, engine = known_replay(bag, tmp_path / "out")
    assert result.exit_code == EXIT_OK
    assert len(engine.calls) == 12  # rate 0: one plan per front image (0.5 .. 6.0 s)
    assert all("The current velocity is: (4.00,0.00)" in p for p in engine.calls)
    metrics = read_metrics(tmp_path / "out")
    # The engine answers x = 5 t, the ego drives x = 4 t: the error at waypoint time t is exactly t.
    expected = {1: (0.75, 1.0), 2: (1.25, 2.0), 3: (1.75, 3.0), 4: (2.25, 4.0)}
    for horizon, (ade, fde) in expected.items():
        assert metrics[f"ade_{horizon}s"] == pytest.approx(ade, abs=1e-9)
        assert metrics[f"fde_{horizon}s"] == pytest.approx(fde, abs=1e-9)
    # Calls 4, 8, 12 (images at 2.0, 4.0, 6.0 s) are invalid. Odometry ends at 8 s, so an instant counts for
    # horizon T only when t + T <= 8: T=4 -> 0.5..4.0 without 2.0, 4.0 = 6; T=3 -> 8; T=2, T=1 -> all 9 valid.
    assert [metrics[f"count_{h}s"] for h in (1, 2, 3, 4)] == [9, 9, 8, 6]
    assert metrics["num_instants"] == 12 and metrics["num_invalid"] == 3 and metrics["invalid_rate"] == 0.25
    latency = metrics["latency_ms"]  # 100, 200, ..., 1200 ms
    assert latency["max"] == pytest.approx(1200.0) and latency["p50"] == pytest.approx(650.0)
    assert [p["mean_l2"] for p in metrics["error_curve"]] == pytest.approx(WAYPOINT_TIMES, abs=1e-9)
    records = read_predictions(tmp_path / "out")
    assert [r["valid"] for r in records] == [k % 4 != 0 for k in range(1, 13)]
    assert records[0]["waypoints"] == [[5.0 * t, 0.0] for t in WAYPOINT_TIMES]
    paths = bag_messages(tmp_path / "out" / "out")["/wam_diff2/output/path"]
    assert len(paths) == 9
    assert [(p.pose.position.x, p.pose.position.y) for p in paths[0].msg.poses] == [
        (5.0 * t, 0.0) for t in WAYPOINT_TIMES
    ]


def test_metrics_on_a_constant_radius_drive_are_exact(tmp_path: Path) -> None:
    speed, radius = 5.0, 20.0
    bag = write_drive_bag(tmp_path / "circle", circle(speed, radius), command="left")
    result, _ = known_replay(bag, tmp_path / "out", engine=KnownAnswerEngine(invalid_every=0))
    assert result.exit_code == EXIT_OK
    metrics = read_metrics(tmp_path / "out")

    def error(h: float) -> float:  # truth on the circle in the ego frame vs the straight answer (5 h, 0)
        theta = speed * h / radius
        return math.hypot(5.0 * h - radius * math.sin(theta), radius * (1.0 - math.cos(theta)))

    for horizon in (1, 2, 3, 4):
        steps = [error(t) for t in WAYPOINT_TIMES if t <= horizon]
        assert metrics[f"ade_{horizon}s"] == pytest.approx(sum(steps) / len(steps), abs=1e-6)
        assert metrics[f"fde_{horizon}s"] == pytest.approx(error(horizon), abs=1e-6)
    assert metrics["invalid_rate"] == 0.0 and metrics["count_4s"] == 8
    assert set(metrics["by_command"]) == {"left"}
    assert (tmp_path / "out" / "plots" / "bev.png").is_file()


class JumpingAnswerEngine(KnownAnswerEngine):
    """Like :class:`KnownAnswerEngine` (never invalid text), but every odd call's plan jumps forward by 3 m
    (calls 1, 5, 9, ...) or 4 m (calls 3, 7, 11, ...) from waypoint 6 on: the gate rejects it."""

    def generate(self, prompt: str, images: Any = (), decode: Any = None, system: Any = None) -> KnownGeneration:
        answer = super().generate(prompt, images, decode, system)
        k = len(self.calls)
        if k % 2:
            answer.text = ", ".join(f"{jump_plan(3.0 if k % 4 == 1 else 4.0)[i]:.2f}, 0.00" for i in range(8))
        return answer


def jump_plan(jump: float) -> list[float]:
    return [5.0 * t + (jump if i >= 5 else 0.0) for i, t in enumerate(WAYPOINT_TIMES)]


def test_rejected_plans_are_summarised_by_rule_and_drawn(tmp_path: Path) -> None:
    from PIL import Image

    from wam_diff2_ros.core.kinematics import check_plan_kinematics

    bag = write_drive_bag(tmp_path / "straight", straight(4.0))
    result, engine = known_replay(bag, tmp_path / "out", engine=JumpingAnswerEngine(invalid_every=0))
    assert result.exit_code == EXIT_OK and len(engine.calls) == 12
    mild, worst = (check_plan_kinematics([(x, 0.0) for x in jump_plan(j)], 0.5, current_speed_mps=4.0) for j in (3, 4))
    assert mild.startswith("acceleration rule") and "= 8.0 m/s²" in worst
    metrics = read_metrics(tmp_path / "out")
    assert metrics["num_invalid"] == 6
    assert metrics["invalid_by_rule"] == {"acceleration": {"count": 6, "worst": worst}}
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert f"  acceleration (6x): {worst.removeprefix('acceleration rule: ')}\n" in summary
    assert " N " not in summary
    with Image.open(tmp_path / "out" / "plots" / "bev.png") as img:  # rejected plans: dashed, tab:red
        pixels = np.asarray(img.convert("RGB"), int)
    assert int((np.abs(pixels - np.array([214, 39, 40])).sum(axis=2) < 30).sum()) > 200


def test_fixed_frame_path_in_the_output_bag_and_metrics_unchanged(tmp_path: Path) -> None:
    from wam_diff2_ros.ros.conversions import stamp_to_ns

    speed, radius = 5.0, 20.0
    pose_fn = circle(speed, radius)
    bag = write_drive_bag(tmp_path / "circle", pose_fn, command="left")
    result, _ = known_replay(bag, tmp_path / "base", engine=KnownAnswerEngine(invalid_every=0))
    assert result.exit_code == EXIT_OK
    messages = bag_messages(tmp_path / "base" / "out")
    fixed = messages["/wam_diff2/output/path_fixed"]
    assert len(fixed) == len(messages["/wam_diff2/output/path"]) == 12
    assert len(messages["/wam_diff2/output/trajectory_fixed"]) == 12
    for message in fixed:
        path = message.msg
        assert path.header.frame_id == "odom"
        t = (stamp_to_ns(path.header.stamp) - T0) / NS
        x0, y0, yaw, _, _ = pose_fn(t)  # the ego at the image stamp (images lie on odometry ticks)
        for i, stamped in enumerate(path.poses):
            forward = 5.0 * WAYPOINT_TIMES[i]  # the engine's answer (forward, 0) in base_link
            expected = (x0 + forward * math.cos(yaw), y0 + forward * math.sin(yaw))
            assert (stamped.pose.position.x, stamped.pose.position.y) == pytest.approx(expected, abs=1e-6)
    records = read_predictions(tmp_path / "base")
    assert all(r["fixed_frame"] == "odom" and len(r["waypoints_fixed"]) == 8 for r in records)
    # planning.frame_id odom: ~/output/path carries the transformed plan; predictions, metrics and the BEV
    # plot stay in the ego frame at the stamp, so they do not change.
    result, _ = known_replay(
        bag,
        tmp_path / "odom",
        engine=KnownAnswerEngine(invalid_every=0),
        overrides={"planning.frame_id": "odom"},
    )
    assert result.exit_code == EXIT_OK
    paths = bag_messages(tmp_path / "odom" / "out")["/wam_diff2/output/path"]
    assert all(m.msg.header.frame_id == "odom" for m in paths)
    assert [[(p.pose.position.x, p.pose.position.y) for p in m.msg.poses] for m in paths] == [
        [(p.pose.position.x, p.pose.position.y) for p in m.msg.poses] for m in fixed
    ]
    assert [r["waypoints"] for r in read_predictions(tmp_path / "odom")] == [r["waypoints"] for r in records]
    base, odom = read_metrics(tmp_path / "base"), read_metrics(tmp_path / "odom")
    assert [base[f"ade_{h}s"] for h in (1, 2, 3, 4)] == [odom[f"ade_{h}s"] for h in (1, 2, 3, 4)]


def test_the_age_gate_runs_on_the_bag_clock(tmp_path: Path) -> None:
    # Bag time stands still while the model decodes: a plan's age is its image's age at the instant (0 here, at
    # planning.rate_hz 0), so even a limit far below any inference time withholds nothing.
    bag = write_drive_bag(tmp_path / "straight", straight(4.0))
    result, _ = known_replay(bag, tmp_path / "out", overrides={"planning.max_plan_age_s": 0.001})
    assert result.exit_code == EXIT_OK
    assert not any("stale" in (r["reason"] or "") for r in read_predictions(tmp_path / "out"))
    # Images 0.2 s before each instant of a 1 Hz planning rate: those plans are 0.2 s old, stale at 0.1 s.
    bag = write_drive_bag(tmp_path / "late", straight(4.0), image_times=[0.3 + 0.5 * k for k in range(12)])
    result, _ = known_replay(
        bag, tmp_path / "rate", overrides={"planning.max_plan_age_s": 0.1, "planning.rate_hz": 1.0}
    )
    stale = [r for r in read_predictions(tmp_path / "rate") if "stale plan" in (r["reason"] or "")]
    assert stale and all(not r["valid"] and r["waypoints"] is None for r in stale)


def test_sqlite3_bag_gives_the_same_metrics(tmp_path: Path) -> None:
    from rosbags.rosbag2 import Writer
    from rosbags.rosbag2.enums import StoragePlugin

    from wam_diff2_ros.bag import default_typestore

    mcap = write_drive_bag(tmp_path / "mcap", straight(4.0))
    db3 = tmp_path / "db3"
    with BagReader(mcap) as reader:
        topics = reader.topics
        writer = Writer(db3, version=8, storage_plugin=StoragePlugin.SQLITE3)
        writer.open()
        connections = {
            name: writer.add_connection(name, info.msgtype, typestore=default_typestore())
            for name, info in topics.items()
        }
        for topic, _, stamp, data in reader.raw_messages():
            writer.write(connections[topic], stamp, data)
        writer.close()
    assert list(db3.glob("*.db3"))
    from_mcap, _ = known_replay(mcap, tmp_path / "out_mcap")
    from_db3, _ = known_replay(db3, tmp_path / "out_db3")
    assert from_db3.exit_code == EXIT_OK
    assert without_timing(read_predictions(tmp_path / "out_db3")) == without_timing(
        read_predictions(tmp_path / "out_mcap")
    )
    assert from_db3.metrics["ade_4s"] == from_mcap.metrics["ade_4s"] == pytest.approx(2.25)


def test_window_and_max_plans(tmp_path: Path) -> None:
    bag = write_drive_bag(tmp_path / "bag", straight(4.0))
    result, _ = known_replay(bag, tmp_path / "window", start_s=1.0, duration_s=2.0)
    assert result.exit_code == EXIT_OK
    records = read_predictions(tmp_path / "window")
    assert [r["t_s"] for r in records] == [1.0, 1.5, 2.0, 2.5, 3.0]
    copied = bag_messages(tmp_path / "window" / "out")["/odom"]
    assert copied[0].stamp_ns == T0 + NS and copied[-1].stamp_ns == T0 + 3 * NS  # only the window is copied
    # ground truth still reaches 4 s past the window: t=3.0 has its full future
    assert result.metrics["count_4s"] == 4  # 1.0, 1.5, 2.5, 3.0 (2.0 is the 4th call: invalid)
    # 4 Hz: at 0.25 s there is no image yet (a blocked instant), at 0.5 s the image received at 0.5 s is used
    result, _ = known_replay(bag, tmp_path / "max", max_plans=2, overrides={"planning.rate_hz": 4.0})
    records = read_predictions(tmp_path / "max")
    assert [(r["t_s"], r["status"]) for r in records] == [(0.25, "blocked"), (0.5, "planned")]
    assert records[0]["problems"] == ["image_0 (front): no image received"]
    assert records[1]["stamp_ns"] == T0 + NS // 2


def test_detection_is_replayed_with_detect(tmp_path: Path) -> None:
    from scripted_engine import ScriptedEngine

    bag = write_drive_bag(tmp_path / "bag", straight(4.0), seconds=3.0, image_times=[0.5, 1.0, 1.5, 2.0, 2.5])
    options = ReplayOptions(
        bag=bag, out=tmp_path / "out", model=str(tmp_path), progress=False, detect=True, rate_hz=2.0
    )
    result = replay(options, engine_factory=ScriptedEngine, log=lambda text: None)
    assert result.exit_code == EXIT_OK
    lines = [json.loads(x) for x in (tmp_path / "out" / "detections.jsonl").read_text().splitlines()]
    assert [round(r["t_s"], 3) for r in lines] == [1.0, 2.0, 3.0]  # detection at 1 Hz (detection.rate_hz 0)
    assert [len(r["detections"]) for r in lines] == [2, 2, 2] and lines[0]["detections"][0]["label"] == "car"
    messages = bag_messages(tmp_path / "out" / "out")
    assert len(messages["/wam_diff2/output/detections"]) == 3
    assert len(messages["/wam_diff2/output/trajectory"]) == 5  # 0.5 .. 2.5 s at 2 Hz


# --- topics ----------------------------------------------------------------------------------------------------


def test_unseen_topic_names_image_size_and_compressed_images(tmp_path: Path, tiny: Path, capsys) -> None:
    bag = write_drive_bag(
        tmp_path / "unseen",
        straight(6.0),
        seconds=3.0,
        image_times=[0.5, 1.0, 1.5],
        image_topic="/sensors/cam_front/jpeg",
        compressed=True,
        size=(200, 120),
        odometry_topic="/vehicle/odometry",
        command_topic="/planner/route_cmd",
    )
    out = tmp_path / "out"
    code = main([str(bag), "--out", str(out), "--model", str(tiny), *FAST, "--rate-hz", "0", "--max-plans", "2"])
    assert code == EXIT_OK, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "camera: /sensors/cam_front/jpeg (the only image topic)" in err
    assert "odometry: /vehicle/odometry" in err and "command: /planner/route_cmd" in err
    records = read_predictions(out)
    assert [r["stamp_ns"] for r in records] == [T0 + NS // 2, T0 + NS]
    assert all(r["status"] == "planned" and r["acceleration_source"] == "odometry" for r in records)
    assert "velocity is: (6.00,0.00)" in records[0]["prompt"]
    debug = bag_messages(out / "out")["/wam_diff2/debug/image"][0].msg
    assert (debug.width, debug.height) == (200, 120)


def test_ambiguous_topics_need_flags(tmp_path: Path, tiny: Path, capsys) -> None:
    from nav_msgs.msg import Odometry

    extra = [
        ("/cam_b/image/compressed", "sensor_msgs/msg/CompressedImage", image_msg(T0 + 100_000_000, 96, 64, True)),
        ("/odometry/gps", "nav_msgs/msg/Odometry", Odometry()),
    ]
    bag = write_drive_bag(
        tmp_path / "two",
        straight(3.0),
        seconds=2.0,
        image_times=[0.5, 1.0],
        image_topic="/cam_a/image_raw",
        size=(160, 120),
        extra=extra,
    )
    out = tmp_path / "out"
    assert main([str(bag), "--out", str(out), "--model", str(tiny)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "2 image topics" in err and "/cam_a/image_raw" in err and "/cam_b/image/compressed" in err
    assert "--image-topic" in err and not out.exists()
    code = main([str(bag), "--out", str(out), "--model", str(tiny), "--image-topic", "/cam_a/image_raw"])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "more than one odometry topic" in err and "/odometry/gps" in err and "--odometry-topic" in err

    args = ["--model", str(tiny), *FAST, "--rate-hz", "0", "--max-plans", "1", "--odometry-topic", "/odom"]
    assert main([str(bag), "--out", str(out), *args, "--image-topic", "/cam_a/image_raw"]) == EXIT_OK
    metrics = read_metrics(out)
    assert metrics["run"]["topics"]["images"] == [{"topic": "/cam_a/image_raw", "transport": "raw"}]
    assert read_predictions(out)[0]["stamp_ns"] == T0 + NS // 2
    out_b = tmp_path / "out_b"
    assert main([str(bag), "--out", str(out_b), *args, "--image-topic", "/cam_b/image/compressed"]) == EXIT_OK
    metrics_b = read_metrics(out_b)
    assert metrics_b["run"]["topics"]["images"] == [{"topic": "/cam_b/image/compressed", "transport": "compressed"}]
    assert read_predictions(out_b)[0]["stamp_ns"] == T0 + 100_000_000  # its only frame


def test_bad_topic_flags(tmp_path: Path, tiny: Path, capsys) -> None:
    bag = write_drive_bag(tmp_path / "bag", straight(3.0), seconds=1.0, image_times=[0.5])
    base = [str(bag), "--out", str(tmp_path / "out"), "--model", str(tiny)]
    assert main([*base, "--image-topic", "/nope"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "/nope: no such topic in the bag" in err and "/cam/image_raw" in err and "/odom" in err
    assert main([*base, "--odometry-topic", "/cam/image_raw"]) == EXIT_USAGE
    assert "expected nav_msgs/msg/Odometry" in capsys.readouterr().err
    assert main([*base, "--image-topic", "/cam/image_raw", "--image-topic", "/cam/image_raw"]) == EXIT_USAGE
    assert main([*base, "--image-topic", "/cam/image_raw", "--image-topic", "/odom"]) == EXIT_USAGE


def test_select_topics_follows_the_camera_info_convention() -> None:
    from wam_diff2_ros.bag import TopicInfo

    def info(name: str, msgtype: str) -> TopicInfo:
        return TopicInfo(name, msgtype, 10)

    topics = {
        t.name: t
        for t in (
            info("/front/image_raw/compressed", "sensor_msgs/msg/CompressedImage"),
            info("/left/image_raw", "sensor_msgs/msg/Image"),
            info("/front/camera_info", "sensor_msgs/msg/CameraInfo"),
            info("/left/camera_info", "sensor_msgs/msg/CameraInfo"),
            info("/odom", "nav_msgs/msg/Odometry"),
            info("/wam_diff2/debug/image", "sensor_msgs/msg/Image"),  # a replay output: never an input
            info("/question", "std_msgs/msg/String"),
            info("/route/command", "std_msgs/msg/String"),
        )
    }
    request = TopicRequest({"image": ["/front/image_raw/compressed", "/left/image_raw"]})
    chosen = replay_tool.select_topics(topics, request, num_cameras=2)
    assert chosen.images == [("/front/image_raw/compressed", "compressed"), ("/left/image_raw", "raw")]
    assert chosen.camera_infos == ["/front/camera_info", "/left/camera_info"]
    assert chosen.command == "/route/command"  # of two String topics, the one named like a command
    assert chosen.acceleration is None and chosen.odometry == "/odom"
    with pytest.raises(replay_tool.ReplayUsageError, match="2 image topics"):
        replay_tool.select_topics(topics, TopicRequest(), num_cameras=1)
    with pytest.raises(replay_tool.ReplayUsageError, match="configure 1 camera"):
        replay_tool.select_topics(topics, request, num_cameras=1)
    off = replay_tool.select_topics(
        topics, TopicRequest({"image": ["/left/image_raw"], "odometry": "none", "command": "none"}), 1
    )
    assert off.odometry is None and off.command is None


def test_replay_inputs_follow_the_input_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every input of the node's table has its replay flag, ``replay.*`` key and QoS parameters, and an input
    added to the table is chosen from a bag and routed to its row without a change in the replay."""
    from wam_diff2_ros.bag import TopicInfo
    from wam_diff2_ros.cli.replay import build_parser, options_from_args
    from wam_diff2_ros.replay import settings, topics
    from wam_diff2_ros.ros.input_rows import InputRow
    from wam_diff2_ros.ros.inputs import INPUTS, InputSpec
    from wam_diff2_ros.ros.params import SPEC_BY_NAME

    for spec in INPUTS:
        args = build_parser().parse_args([str(tmp_path), "--out", str(tmp_path / "out"), spec.flag, "/t"])
        assert options_from_args(args).topics.get(spec.role) == (["/t"] if spec.per_camera else "/t")
        assert settings.REPLAY_KEYS[f"replay.{spec.request_key}"] is spec
        assert f"qos.{spec.qos_key}.reliability" in SPEC_BY_NAME
    steering = InputSpec("steering", ("std_msgs/msg/Float64",), ("on_steering",), "odometry")
    monkeypatch.setattr(topics, "SINGLE_INPUTS", (*topics.SINGLE_INPUTS, steering))
    bag_topics = {
        t.name: t
        for t in (
            TopicInfo("/cam/image_raw", "sensor_msgs/msg/Image", 3),
            TopicInfo("/odom", "nav_msgs/msg/Odometry", 3),
            TopicInfo("/vehicle/steering", "std_msgs/msg/Float64", 3),
        )
    }
    chosen = topics.select_topics(bag_topics, TopicRequest(), num_cameras=1)
    assert chosen.steering == "/vehicle/steering" and "/vehicle/steering" in chosen.inputs()
    assert chosen.as_dict()["steering"] == "/vehicle/steering"
    assert "steering: /vehicle/steering (the only std_msgs/msg/Float64 topic)" in chosen.notes
    row = InputRow("steering", steering.topic(), object, "odometry", "steering", lambda msg, ns: None)
    assert topics.routes(chosen, [row]) == {"/vehicle/steering": row}
    off = topics.select_topics(bag_topics, TopicRequest({"steering": "none"}), num_cameras=1)
    assert off.steering is None and "steering: off (--steering-topic none)" in off.notes


# --- planning instants ---------------------------------------------------------------------------------------


def test_instant_schedule_follows_the_node_rule() -> None:
    at_rate = InstantSchedule(T0, rate_hz=2.0, detect_rate_hz=1.0)
    assert list(at_rate.due(T0 + NS // 2)) == []  # an instant at t runs only before a message later than t
    assert list(at_rate.due(T0 + NS + 1)) == [(T0 + NS // 2, "plan"), (T0 + NS, "plan"), (T0 + NS, "detect")]
    on_images = InstantSchedule(T0, rate_hz=0.0)
    on_images.front_image(T0 + 5)
    on_images.front_image(T0 + 5)  # a second camera message at the same time: one plan
    assert list(on_images.due(T0 + 5)) == []  # messages with the same receive time are fed first
    assert list(on_images.due(T0 + 6)) == [(T0 + 5, "plan")]
    assert list(on_images.due(T0 + 100)) == []


# --- damaged and incomplete bags ------------------------------------------------------------------------------


def test_truncated_bag_keeps_what_was_decoded(sample_bag: Path, tiny: Path, tmp_path: Path, capsys) -> None:
    cut = tmp_path / "cut"
    shutil.copytree(sample_bag, cut)
    storage = next(cut.glob("*.mcap"))
    data = storage.read_bytes()
    storage.write_bytes(data[: int(len(data) * 0.6)])
    out = tmp_path / "out"
    code = main([str(cut), "--out", str(out), "--model", str(tiny), *FAST, "--rate-hz", "1"])
    captured = capsys.readouterr()
    assert code == EXIT_BAG_DAMAGED
    assert str(storage) in captured.err and "byte" in captured.err and "replayed until t=" in captured.err
    records = read_predictions(out)
    metrics = read_metrics(out)
    assert records and all(r["status"] == "planned" for r in records)
    assert metrics["complete"] is False and str(storage) in metrics["bag_error"]
    assert metrics["num_instants"] == len(records) and metrics["exit_code"] == EXIT_BAG_DAMAGED
    last = metrics["run"]["last_message_ns"]
    assert T0 + NS < last < T0 + 4 * NS and all(r["t_ns"] <= last for r in records)
    with BagReader(out / "out") as reader:  # closed cleanly: index and metadata.yaml are there
        assert reader.damaged is None and reader.topics["/wam_diff2/output/trajectory"].count == len(records)
    assert "bag damaged" in (out / "summary.txt").read_text()


def test_bag_without_odometry_reports_why(tmp_path: Path, tiny: Path, capsys) -> None:
    bag = write_drive_bag(tmp_path / "no_odom", straight(3.0), seconds=3.0, odometry_topic=None)
    out = tmp_path / "out"
    code = main([str(bag), "--out", str(out), "--model", str(tiny), "--rate-hz", "2"])
    captured = capsys.readouterr()
    assert code == EXIT_NO_PLANS
    assert "odometry: no odometry received" in captured.err and "odometry: the bag has no" in captured.err
    records = read_predictions(out)
    assert records and all(r["status"] == "blocked" for r in records)
    assert all("odometry: no odometry received" in r["problems"] for r in records)
    metrics = read_metrics(out)
    assert metrics["num_instants"] == 0 and metrics["planning_instants"] == len(records)
    assert metrics["blocked_inputs"]["odometry"] == len(records)
    assert metrics["ground_truth"]["available"] is False and "no odometry topic" in metrics["ground_truth"]["reason"]
    assert metrics["notes"][0].startswith("no instant could be planned: odometry: no odometry received")
    assert metrics["ade_4s"] is None
    with BagReader(out / "out") as reader:
        assert reader.topics["/wam_diff2/output/trajectory"].count == 0
        assert reader.topics["/cam/image_raw"].count == 12  # inputs still copied
    assert not (out / "plots").exists()
    assert "no instant could be planned" in (out / "summary.txt").read_text()


# --- the command line ---------------------------------------------------------------------------------------------


def test_bad_command_lines(tmp_path: Path, tiny: Path, capsys, monkeypatch) -> None:
    bag = write_drive_bag(tmp_path / "bag", straight(3.0), seconds=1.0, image_times=[0.5])
    out = str(tmp_path / "out")

    def fails(argv: list[str], code: int, *needles: str) -> None:
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert err.count("error:") == 1, err
        for needle in needles:
            assert needle in err, (needle, err)

    fails([str(bag), "--out", out, "--model", str(tiny), "--bogus"], EXIT_USAGE, "unrecognized arguments: --bogus")
    fails([str(bag)], EXIT_USAGE, "--out")
    fails([str(tmp_path / "missing"), "--out", out, "--model", str(tiny)], EXIT_USAGE, "no such file")
    fails([str(bag), "--out", out], EXIT_USAGE, "no model", "--model demo")
    fails([str(bag), "--out", out, "--model", str(tmp_path / "nope")], EXIT_USAGE, "not a directory")
    fails([str(bag), "--out", out, "--model", str(tiny), "--set", "decoding.steps=3"], EXIT_USAGE, "unknown parameter")
    fails([str(bag), "--out", out, "--model", str(tiny), "--set", "noequals"], EXIT_USAGE, "key=value")
    fails(
        [str(bag), "--out", out, "--model", str(tiny), "--set", "planning.rate_hz=-1", "--set", "model.dtype=int8"],
        EXIT_USAGE,
        "planning.rate_hz",
        "model.dtype",
    )
    fails([str(bag), "--out", out, "--model", str(tiny), "--rate-hz", "fast"], EXIT_USAGE, "invalid float value")
    fails([str(bag), "--out", out, "--model", str(tiny), "--params", str(tmp_path / "x.yaml")], EXIT_USAGE, "x.yaml")
    assert not Path(out).exists()  # nothing written for a bad command line

    def unavailable(*args: Any, **kwargs: Any) -> Path:
        raise RuntimeError("demo files are not shipped")

    import wam_diff2_ros.demo.expand as demo

    monkeypatch.setattr(demo, "demo_checkpoint", unavailable)
    fails([str(bag), "--out", out, "--model", "demo"], EXIT_FAILED, "demo model")

    (Path(out) / "predictions.jsonl").parent.mkdir(parents=True)
    (Path(out) / "predictions.jsonl").write_text("earlier\n")
    (Path(out) / "notes.txt").write_text("mine\n")
    fails([str(bag), "--out", out, "--model", str(tiny)], EXIT_USAGE, "--overwrite")
    assert (Path(out) / "predictions.jsonl").read_text() == "earlier\n"
    assert main([str(bag), "--out", out, "--model", str(tiny), *FAST, "--overwrite", "--no-plots"]) == EXIT_OK
    assert (Path(out) / "notes.txt").read_text() == "mine\n"  # --overwrite replaces only the replay's outputs
    assert (Path(out) / "predictions.jsonl").read_text() != "earlier\n"


def test_topics_from_the_parameters_file(tmp_path: Path) -> None:
    other = [("/y/img", "sensor_msgs/msg/Image", image_msg(T0 + 100_000_000, 64, 48, False))]
    bag = write_drive_bag(tmp_path / "bag", straight(4.0), image_topic="/x/img", odometry_topic="/x/odom", extra=other)
    with pytest.raises(replay_tool.ReplayUsageError, match="2 image topics"):  # without the file: ambiguous
        known_replay(bag, tmp_path / "auto")
    params = tmp_path / "replay.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    planning:\n      rate_hz: 0.0\n"
        "    replay:\n      image_topics: [/x/img]\n      odometry_topic: /x/odom\n      acceleration_topic: none\n",
        encoding="utf-8",
    )
    result, _ = known_replay(bag, tmp_path / "out", params=params)
    assert result.exit_code == EXIT_OK
    assert result.metrics["run"]["topics"]["odometry"] == "/x/odom"
    assert result.metrics["ade_4s"] == pytest.approx(2.25)


def test_model_demo_uses_the_demo_checkpoint(tmp_path: Path, tiny: Path, monkeypatch) -> None:
    import wam_diff2_ros.demo.expand as demo

    demo_dir = tmp_path / "demo-0123456789ab"
    shutil.copytree(tiny, demo_dir)
    config_path = demo_dir / "preprocessor_config.json"
    preprocessor = json.loads(config_path.read_text())
    preprocessor["size"] = {"longest_edge": 131072, "shortest_edge": 12544}
    config_path.write_text(json.dumps(preprocessor))
    monkeypatch.setattr(demo, "demo_checkpoint", lambda: demo_dir)
    bag = write_drive_bag(tmp_path / "bag", straight(3.0), seconds=1.0, image_times=[0.5], size=(960, 540))
    out = tmp_path / "out"
    assert main([str(bag), "--out", str(out), "--model", "demo", *FAST, "--no-plots"]) == EXIT_OK
    run = read_metrics(out)["run"]
    # the node's request limits, as the node uses them; the checkpoint's own 131072 cap applies inside its processor
    assert run["model_path"] == str(demo_dir) and run["pixel_limits"] == [12544, 2073600]
    assert (
        main([str(bag), "--out", str(out), "--model", "demo", *FAST, "--overwrite", "--set", "model.max_pixels=50000"])
        == 0
    )
    assert read_metrics(out)["run"]["pixel_limits"] == [12544, 50000]


def test_two_cameras_in_flag_order_with_their_own_transports(tmp_path: Path) -> None:
    bag = write_drive_bag(
        tmp_path / "two_cameras",
        straight(4.0),
        seconds=3.0,
        image_times=[0.5, 1.0],
        image_topic="/front/image_raw",
        more_cameras=[("/left/image_raw/compressed", True, (96, 64))],
    )
    template = (
        "Front: <image>\nLeft: <image>\nThe navigation information is: {command}\n"
        "The current velocity is: ({vx},{vy}) and current accelerate is: ({ax},{ay})\nPlan 8 waypoints."
    )
    overrides = replay_tool.parse_set(["cameras.names=[front, left]", f"prompt.template={template}"])
    request = TopicRequest({"image": ["/front/image_raw", "/left/image_raw/compressed"]})
    result, engine = known_replay(bag, tmp_path / "out", topics=request, overrides=overrides)
    assert result.exit_code == EXIT_OK
    assert engine.image_shapes == [[(48, 64, 3), (64, 96, 3)]] * 2  # prompt image order = camera order
    assert engine.calls[0].startswith("Front: <image>\nLeft: <image>\nThe navigation information is: straight")
    assert result.metrics["run"]["topics"]["images"] == [
        {"topic": "/front/image_raw", "transport": "raw"},
        {"topic": "/left/image_raw/compressed", "transport": "compressed"},
    ]
    assert read_predictions(tmp_path / "out")[0]["image_stamps_ns"] == [T0 + NS // 2] * 2


def test_set_values_keep_text_and_parse_the_rest() -> None:
    values = replay_tool.parse_set(
        [
            "prompt.template=Front: <image> {command}",
            "cameras.names=[front, left]",
            "planning.rate_hz=0",
            "debug.image=false",
        ]
    )
    assert values == {
        "prompt.template": "Front: <image> {command}",
        "cameras.names": ["front", "left"],
        "planning.rate_hz": 0,
        "debug.image": False,
    }
    with pytest.raises(replay_tool.ReplayUsageError, match=r"did you mean planning\.rate_hz"):
        replay_tool.parse_set(["rate_hz=2"])


def test_sigterm_ends_the_replay_with_its_outputs_written(sample_bag: Path, tiny: Path, tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    out = tmp_path / "out"
    command = [str(Path(sys.executable).with_name("wam-diff2-replay")), str(sample_bag), "--out", str(out)]
    process = subprocess.Popen(
        [*command, "--model", str(tiny), *FAST, "--no-plots"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        predictions = out / "predictions.jsonl"
        while time.monotonic() < deadline and process.poll() is None:
            if predictions.is_file() and predictions.read_text().count("\n") >= 1:
                break
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err.decode()
    assert b"interrupted at t=" in err
    metrics = read_metrics(out)
    assert metrics["exit_code"] == 130 and metrics["complete"] is False
    assert 1 <= metrics["num_instants"] < 7 and metrics["num_instants"] == len(read_predictions(out))
    with BagReader(out / "out") as reader:  # closed cleanly
        assert reader.damaged is None
        assert reader.topics["/wam_diff2/output/trajectory"].count == metrics["num_instants"]


def test_interrupt_gate_holds_a_signal_until_the_instant_is_written() -> None:
    import os
    import signal
    import time

    from wam_diff2_ros.replay import InterruptGate

    gate = InterruptGate()
    previous = gate.install()
    try:
        written = []
        with pytest.raises(KeyboardInterrupt, match=f"signal {int(signal.SIGTERM)}"), gate.held():
            os.kill(os.getpid(), signal.SIGTERM)
            written.append("bag")  # still runs: the signal waits for the end of the block
            written.append("predictions")
        assert written == ["bag", "predictions"]
        with pytest.raises(KeyboardInterrupt):  # outside a held block it interrupts at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)
            written.append("never")
        assert written == ["bag", "predictions"]
        # an error inside is not replaced by the held signal
        with pytest.raises(ValueError, match="own"), gate.held():
            os.kill(os.getpid(), signal.SIGTERM)
            raise ValueError("own error")
    finally:
        gate.restore(previous)
    assert signal.getsignal(signal.SIGTERM) == previous[signal.SIGTERM]


def test_interrupt_gate_still_ends_the_replay_when_native_code_swallowed_the_signal() -> None:
    """A KeyboardInterrupt raised inside rclpy's deserialiser comes out as another error (seen in CI): ``check``."""
    import os
    import signal
    import time

    from wam_diff2_ros.replay import InterruptGate

    gate = InterruptGate()
    previous = gate.install()
    try:
        gate.check()  # nothing arrived yet
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)
        except KeyboardInterrupt as exc:
            swallowed = RuntimeError(f"Unable to convert function return value ({exc})")  # what pybind11 raised
        assert "signal" in str(swallowed)
        with pytest.raises(KeyboardInterrupt, match=f"signal {int(signal.SIGTERM)}"):
            gate.check()
    finally:
        gate.restore(previous)
    previous = gate.install()  # a new replay starts clean
    try:
        gate.check()
    finally:
        gate.restore(previous)
