"""The replay with ``autoware.outputs`` and ``command.source: turn_indicators``: a drive bag with Autoware's turn
signal and no command topic, through the node's real runtime (known-answer engine, ``test_replay.py``). The output
bag holds a Trajectory and CandidateTrajectories with every Path, which pass the follower's rules and equal
``path_fixed`` after the ego point; ``predictions.jsonl`` holds the same points; the command follows the signal
with its hold; waypoints that duplicate the ego position give no Autoware trajectory and the reason on
``PlannedTrajectory``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")
pytest.importorskip("autoware_vehicle_msgs", reason="autoware messages missing: run wam-diff2-build-interfaces")

from test_node_autoware import follower_problems
from test_replay import (
    NS,
    T0,
    KnownAnswerEngine,
    KnownGeneration,
    KnownTiming,
    _time,
    bag_messages,
    circle,
    image_msg,
    known_replay,
    odometry_msg,
    read_predictions,
)

from wam_diff2_ros.bag import BagWriter
from wam_diff2_ros.replay import EXIT_OK
from wam_diff2_ros.ros.autoware import GENERATOR_ID
from wam_diff2_ros.ros.conversions import stamp_to_ns

AUTOWARE = {"autoware.outputs": True, "command.source": "turn_indicators", "command.turn_signal_hold_s": 1.0}
LEFT, OFF = 2, 1


def signal_at(t: float) -> int:
    """Left until 3.0 s, a 0.3 s blink off, left again, off from 4.5 s."""
    return OFF if 3.0 <= t < 3.3 - 1e-9 or t >= 4.5 - 1e-9 else LEFT


def write_signal_bag(path: Path, pose_fn: Any, seconds: float = 6.5) -> Path:
    """50 Hz odometry, 10 Hz TurnIndicatorsCommand (no command topic), images every 0.5 s."""
    from autoware_vehicle_msgs.msg import TurnIndicatorsCommand

    events = []
    for k in range(round(seconds * 50) + 1):
        stamp = T0 + k * 20_000_000
        events.append((stamp, 0, "/odom", odometry_msg(stamp, *pose_fn(k * 0.02))))
    for k in range(round(seconds * 10) + 1):
        stamp = T0 + k * 100_000_000
        events.append(
            (
                stamp,
                1,
                "/planning/turn_indicators_cmd",
                TurnIndicatorsCommand(stamp=_time(stamp), command=signal_at(k / 10)),
            )
        )
    for i in range(1, round(seconds * 2) + 1):
        stamp = T0 + i * 500_000_000
        events.append((stamp, 2, "/cam/image_raw", image_msg(stamp, 64, 48, False, seed=i)))
    events.sort(key=lambda e: (e[0], e[1]))
    with BagWriter(path) as bag:
        bag.add_topic("/odom", "nav_msgs/msg/Odometry")
        bag.add_topic("/planning/turn_indicators_cmd", "autoware_vehicle_msgs/msg/TurnIndicatorsCommand")
        bag.add_topic("/cam/image_raw", "sensor_msgs/msg/Image")
        for stamp, _, topic, msg in events:
            bag.write(topic, msg, stamp)
    return path


def test_replay_writes_autoware_trajectories_and_follows_the_turn_signal(tmp_path: Path) -> None:
    pose_fn = circle(5.0, 20.0)
    bag = write_signal_bag(tmp_path / "drive", pose_fn)
    result, _ = known_replay(bag, tmp_path / "out", engine=KnownAnswerEngine(invalid_every=0), overrides=AUTOWARE)
    assert result.exit_code == EXIT_OK
    messages = bag_messages(tmp_path / "out" / "out")
    paths = messages["/wam_diff2/output/path"]
    fixed = {stamp_to_ns(m.msg.header.stamp): m.msg for m in messages["/wam_diff2/output/path_fixed"]}
    trajectories = messages["/wam_diff2/output/autoware/trajectory"]
    candidates = messages["/wam_diff2/output/autoware/candidates"]
    assert len(trajectories) == len(candidates) == len(paths) == 13
    for message in trajectories:
        trajectory = message.msg
        assert follower_problems(trajectory) == []
        stamp = stamp_to_ns(trajectory.header.stamp)
        assert trajectory.header.frame_id == "odom"
        x0, y0, yaw, speed, _ = pose_fn((stamp - T0) / NS)  # the ego at the image stamp
        ego = trajectory.points[0]
        assert (ego.pose.position.x, ego.pose.position.y) == pytest.approx((x0, y0), abs=1e-6)
        assert ego.longitudinal_velocity_mps == pytest.approx(speed)
        q = ego.pose.orientation
        assert math.remainder(2.0 * math.atan2(q.z, q.w) - yaw, math.tau) == pytest.approx(0.0, abs=1e-6)
        assert [p.pose.position for p in trajectory.points[1:]] == [p.pose.position for p in fixed[stamp].poses]
        for point, pose in zip(trajectory.points[1:], fixed[stamp].poses, strict=True):  # a straight plan: the
            tangent, previous = (2.0 * math.atan2(q.z, q.w) for q in (point.pose.orientation, pose.pose.orientation))
            assert math.remainder(tangent - previous, math.tau) == pytest.approx(0.0, abs=1e-6)  # same direction
        assert all(p.longitudinal_velocity_mps == pytest.approx(5.0, rel=1e-3) for p in trajectory.points[1:])
    for message in candidates:
        (candidate,) = message.msg.candidate_trajectories
        (info,) = message.msg.generator_info
        assert bytes(candidate.generator_id.uuid) == bytes(info.generator_id.uuid) == GENERATOR_ID.bytes

    records = read_predictions(tmp_path / "out")
    by_time = {round((r["stamp_ns"] - T0) / NS, 3): r for r in records}
    for record in records:
        points = record["autoware_trajectory"]
        assert len(points) == 9 and [p["t"] for p in points] == [0.5 * i for i in range(9)]
        assert [v for p in points[1:] for v in (p["x"], p["y"])] == pytest.approx(
            [v for xy in record["waypoints_fixed"] for v in xy]
        )
    # left, held through the 0.3 s blink at 3.0 s and for 1 s after 4.5 s, then straight
    commands = {t: r["command"] for t, r in by_time.items()}
    assert {t: c for t, c in commands.items() if t <= 5.0} == {t: "left" for t in commands if t <= 5.0}
    assert commands[5.5] == commands[6.0] == commands[6.5] == "straight"


class DuplicateWaypointEngine:
    """Standing still: answers a first waypoint on the ego position (0, 0), then moves off."""

    name, device, dtype = "duplicate-waypoint", "cpu", "float32"

    def generate(self, prompt: str, images: Any = (), decode: Any = None, system: Any = None) -> KnownGeneration:
        return KnownGeneration(
            ", ".join(["0.00, 0.00"] + [f"{0.1 * k:.2f}, 0.00" for k in range(1, 8)]), KnownTiming(0.1)
        )


def test_waypoints_without_a_finite_trajectory_publish_nothing_with_the_reason(tmp_path: Path) -> None:
    stand = lambda t: (3.0, 4.0, 0.2, 0.0, 0.0)  # noqa: E731
    bag = write_signal_bag(tmp_path / "drive", stand, seconds=2.0)
    result, _ = known_replay(bag, tmp_path / "out", engine=DuplicateWaypointEngine(), overrides=AUTOWARE)
    assert result.exit_code == EXIT_OK
    messages = bag_messages(tmp_path / "out" / "out")
    assert "/wam_diff2/output/autoware/trajectory" not in messages and "/wam_diff2/output/path" not in messages
    planned = messages["/wam_diff2/output/trajectory"]
    assert planned and all(not m.msg.valid for m in planned)
    assert all("waypoint 1 duplicates the ego position" in m.msg.invalid_reason for m in planned)
    assert all(r["autoware_trajectory"] is None and not r["valid"] for r in read_predictions(tmp_path / "out"))


def test_a_requested_autoware_output_without_its_messages_is_a_usage_error(tmp_path: Path, monkeypatch) -> None:
    from wam_diff2_ros.replay import ReplayUsageError

    bag = write_signal_bag(tmp_path / "drive", circle(5.0, 20.0), seconds=1.0)
    monkeypatch.setitem(sys.modules, "autoware_internal_planning_msgs.msg", None)  # as if not installed
    with pytest.raises(ReplayUsageError, match=r"needs the message package\(s\) autoware_internal_planning_msgs"):
        known_replay(bag, tmp_path / "out", overrides=AUTOWARE)
    assert not (tmp_path / "out" / "predictions.jsonl").exists()
