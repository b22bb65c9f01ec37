"""``wam-diff2-drive --driver``: the simulator as AlpaSim's egodriver runtime over real gRPC (loopback TCP and a
unix socket), against ``carla-driver-interface``'s reference policies served by its own server: the route reaches
the policy in the rig frame (route_follower keeps the lane through a 20 m left turn), the plans drive the car
through the same controller and score, the session is closed, and a policy that answers no trajectory gets the
controller's comfortable stop."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("carla_driver_interface", reason="carla-driver-interface is not installed")

from carla_driver_interface.driver import BaseDriver, DriveContext, DriveResult
from carla_driver_interface.geometry import Trajectory
from carla_driver_interface.policies.constant_speed import ConstantSpeedPolicy
from carla_driver_interface.policies.route_follower import RouteFollowerPolicy
from carla_driver_interface.server import serving

from wam_diff2_ros.drive.episode import EpisodeOptions
from wam_diff2_ros.drive.run import DriveUsageError, node_config, run_episode
from wam_diff2_ros.drive.world import load_scenarios
from wam_diff2_ros.sim.render import CameraModel

LATENCY_MS = 50.0


class Recording(BaseDriver):
    """Wraps a policy; remembers the sessions opened and closed and the routes and cameras it was sent."""

    def __init__(self, policy: BaseDriver) -> None:
        self.policy, self.name = policy, policy.name
        self.started: list[str] = []
        self.closed: list[str] = []
        self.cameras: list[dict] = []
        self.frames = 0

    def on_session_start(self, session) -> None:
        self.started.append(session.uuid)
        self.cameras = [
            {"id": cid, "w": c.intrinsics.resolution_w, "fx": c.intrinsics.opencv_pinhole_param.focal_length_x}
            for cid, c in session.cameras.items()
        ]

    def on_session_close(self, session) -> None:
        self.closed.append(session.uuid)

    def on_frame(self, session, frame) -> None:
        self.frames += 1

    def drive(self, ctx: DriveContext) -> DriveResult:
        return self.policy.drive(ctx)


class Holding(BaseDriver):
    """Answers every drive with no trajectory (AlpaSim's "hold")."""

    name = "holding"

    def drive(self, ctx: DriveContext) -> DriveResult:
        return DriveResult(trajectory_in_rig=Trajectory.empty())


def _ground_truth(bag: Path) -> list[dict]:
    from wam_diff2_ros.bag import BagReader

    with BagReader(bag) as reader:
        return [json.loads(m.msg.data) for m in reader.messages() if m.topic == "/sim/ground_truth"]


def _episode(tmp_path: Path, scenario: str, address: str, seconds: float, name: str = "out"):
    spec = replace(load_scenarios(scenario)[0], duration_s=seconds)
    options = EpisodeOptions(
        out=tmp_path / name, latency_ms=LATENCY_MS, width=320, height=180, video=False, report=False, driver=address
    )
    return run_episode(spec, options, node_config("tiny"), None, log=lambda _text: None)


def test_route_follower_keeps_the_lane_through_a_left_turn_over_tcp(tmp_path: Path) -> None:
    policy = Recording(RouteFollowerPolicy(cruise_speed_mps=8.0))
    with serving(policy, port=0, host="127.0.0.1", mode="alpasim") as port:
        result = _episode(tmp_path, "left_r20", f"127.0.0.1:{port}", 8.0)
    document = json.loads((tmp_path / "out" / "score.json").read_text(encoding="utf-8"))
    assert document["mode"] == "driver" and "route_follower" in document["model"]
    assert document["stop_reason"] == "the scenario's 8 s are over"
    plans = document["plans"]
    assert plans["made"] == plans["valid"] >= 70  # a drive after every frame (10 Hz), each a valid plan
    score = result.score["score"]
    assert score["lane_deviation_m"]["max"] < 0.5 and score["dac"] == 1.0 and score["nc"] == 1.0
    assert policy.started == policy.closed and len(policy.started) == 1
    assert policy.cameras == [{"id": "camera_front", "w": 320, "fx": CameraModel.for_size(320, 180).fx}]
    assert policy.frames == 81  # every 100 ms from 0 to 8 s


def test_constant_speed_over_a_unix_socket_holds_its_speed(tmp_path: Path) -> None:
    socket = f"unix:{tmp_path / 'policy.sock'}"
    with serving(ConstantSpeedPolicy(cruise_speed_mps=10.0), host=socket, mode="alpasim"):
        result = _episode(tmp_path, "straight_10", socket, 4.0)
    speeds = [row["ego"]["v"] for row in _ground_truth(tmp_path / "out" / "episode")]
    assert len(speeds) == 41
    assert "constant_speed" in result.score["model"]
    assert result.score["plans"]["valid"] == result.score["plans"]["made"] > 30
    assert result.score["score"]["lane_deviation_m"]["max"] < 0.3
    assert all(abs(v - 10.0) < 0.5 for v in speeds)


def test_a_policy_that_answers_no_trajectory_gets_the_comfortable_stop(tmp_path: Path) -> None:
    with serving(Holding(), port=0, host="127.0.0.1", mode="alpasim") as port:
        result = _episode(tmp_path, "straight_5", f"127.0.0.1:{port}", 15.0)
    plans = result.score["plans"]
    assert plans["valid"] == 0 and plans["made"] > 0
    assert list(plans["rejection_reasons"]) == ["hold"]  # the reasons' first words, counted
    assert result.score["stop_reason"].startswith("stopped: no valid plan in force")


def test_no_policy_at_the_address_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(DriveUsageError, match="no egodriver policy at unix:"):
        _episode(tmp_path, "straight_5", f"unix:{tmp_path / 'nobody.sock'}", 1.0)
