"""``wam-diff2-drive --driver``: the simulator as AlpaSim's egodriver runtime over real gRPC (loopback TCP and a
unix socket), against ``carla-driver-interface``'s reference policies served by its own server: the route reaches
the policy in the rig frame (route_follower keeps the lane through a 20 m left turn), the plans drive the car
through the same controller and score, the session is closed, and a policy that answers no trajectory gets the
controller's comfortable stop."""

from __future__ import annotations

import json
import math
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


def test_the_packages_policy_over_grpc_drives_the_in_process_path(tmp_path: Path) -> None:
    """The package's own policy (``WamDiff2Driver``) served over gRPC against the in-process planner, both with the
    scripted engine, the same fixed latency and a plan on each frame when the model is free. The scripted engine
    drives straight on along its heading, so from offset_left's start (1 m left, 3° off) the ego drifts left; the
    world's command stays ``straight`` while the route rule would ask for ``right`` once the lane centre 20 m ahead
    is 3 m aside (after about 2 s): with the rule's threshold at 10 m both commands are ``straight`` throughout,
    the prompts carry the same speed and acceleration, the plans are the same and the ego paths agree within 1 cm
    (measured: under 1e-6 m; what is left is float rounding through the contract's quaternion poses)."""
    from scripted_engine import ScriptedEngine

    from wam_diff2_ros.egodriver.policy import WamDiff2Driver

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    spec = replace(load_scenarios("offset_left")[0], duration_s=4.0)
    config = node_config(str(model_dir), overrides={"planning.rate_hz": 0.0})
    options = EpisodeOptions(out=tmp_path / "local", latency_ms=300.0, width=320, height=180, video=False, report=False)
    local = run_episode(spec, options, config, ScriptedEngine(), log=lambda _text: None)
    policy = WamDiff2Driver(model=str(model_dir), engine=ScriptedEngine(), route_lateral_threshold_m=10.0)
    socket = f"unix:{tmp_path / 'wam.sock'}"
    with serving(policy, host=socket, mode="alpasim"):
        remote = run_episode(
            spec, replace(options, out=tmp_path / "remote", driver=socket), config, None, log=lambda _text: None
        )
    assert "wam_diff2" in remote.score["model"] and remote.score["mode"] == "driver"
    for key in ("made", "valid"):
        assert remote.score["plans"][key] == local.score["plans"][key] > 10
    here = {row["t"]: (row["ego"]["x"], row["ego"]["y"]) for row in _ground_truth(tmp_path / "local" / "episode")}
    there = {row["t"]: (row["ego"]["x"], row["ego"]["y"]) for row in _ground_truth(tmp_path / "remote" / "episode")}
    assert sorted(here) == sorted(there) and len(here) == 41
    deviation = max(math.dist(here[t], there[t]) for t in here)
    assert deviation < 0.01, deviation
    drift = [row["route"]["d"] for row in _ground_truth(tmp_path / "remote" / "episode")]
    assert drift[-1] - drift[0] > 1.0  # not a trivial path: 3° off the lane, the ego drifted left


def test_debug_scalars_are_read_from_either_payload_and_a_pickled_class_is_never_loaded() -> None:
    import pickle

    from carla_driver_interface.protocol import CarlaDriveDebugInfo, pack_debug_info

    from wam_diff2_ros.drive.egodriver import debug_scalars, policy_verdict

    carla = pack_debug_info(CarlaDriveDebugInfo(policy_name="p", scalars={"valid": 0.0, "rejected: too fast": 1.0}))
    assert debug_scalars(carla) == {"valid": 0.0, "rejected: too fast": 1.0}
    alpasim = pickle.dumps({"policy_name": "p", "inference_seconds": 0.1, "scalars": {"valid": 1.0}})
    assert debug_scalars(alpasim) == {"valid": 1.0}
    assert debug_scalars(pickle.dumps({"scalars": {"x": Path("/")}})) == {}  # a class: refused, nothing loaded
    assert debug_scalars(b"") == {} and debug_scalars(b"\x00garbage") == {}
    assert policy_verdict({"valid": 0.0, "rejected: too fast": 1.0}) == "too fast"
    assert policy_verdict({"valid": 1.0}) == "" and policy_verdict({}) == ""


def test_the_command_line_refuses_a_missing_policy_and_driver_with_dds(tmp_path: Path, capsys) -> None:
    from wam_diff2_ros.cli.drive import main

    out = str(tmp_path / "cli")
    assert main(["straight_5", "--driver", f"unix:{tmp_path / 'none.sock'}", "--out", out, "--no-video"]) == 2
    assert "no egodriver policy at unix:" in capsys.readouterr().err
    assert main(["straight_5", "--driver", "127.0.0.1:1", "--dds", "--out", out]) == 2
    assert "not with --dds" in capsys.readouterr().err


class Failing(BaseDriver):
    """Drives like constant_speed for ten calls, then every drive fails (a gRPC error on the wire)."""

    name = "failing"

    def __init__(self) -> None:
        self.inner, self.calls = ConstantSpeedPolicy(cruise_speed_mps=5.0), 0

    def drive(self, ctx: DriveContext) -> DriveResult:
        self.calls += 1
        if self.calls > 10:
            raise RuntimeError("the policy broke")
        return self.inner.drive(ctx)


def test_a_policy_whose_drives_fail_ends_the_episode_after_three(tmp_path: Path) -> None:
    with serving(Failing(), port=0, host="127.0.0.1", mode="alpasim") as port:
        result = _episode(tmp_path, "straight_5", f"127.0.0.1:{port}", 10.0)
    assert result.score["plans"]["made"] == result.score["plans"]["valid"] == 10
    assert result.score["stop_reason"].startswith("the policy failed 3 times in a row")
    assert result.score["simulated_s"] < 2.0


def test_outside_policies_stand_beside_the_model_in_the_score_table(tmp_path: Path) -> None:
    """``--references --reference-driver NAME=ADDRESS``: carla-driver-interface's route_follower and constant_speed,
    served over TCP and a unix socket, driven into OUT/references/NAME/ and put beside the model in the table; a
    second run resumes every episode (a policy's address is part of its settings)."""
    import subprocess
    import sys

    out = tmp_path / "table"
    socket = f"unix:{tmp_path / 'cs.sock'}"
    with (
        serving(RouteFollowerPolicy(cruise_speed_mps=8.0), port=0, host="127.0.0.1", mode="alpasim") as port,
        serving(ConstantSpeedPolicy(cruise_speed_mps=10.0), host=socket, mode="alpasim"),
    ):
        command = [sys.executable, "-m", "wam_diff2_ros.cli.drive", "straight_10", "--model", "constant-velocity"]
        command += ["--out", str(out), "--duration", "2", "--latency-ms", "200", "--size", "64x48", "--no-bag"]
        command += ["--no-video", "--references", "--reference-driver", f"route_follower=127.0.0.1:{port}"]
        command += ["--reference-driver", f"constant_speed={socket}"]
        first = subprocess.run(command, capture_output=True, text=True, timeout=300)
        again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    table = json.loads((out / "scores.json").read_text(encoding="utf-8"))
    assert list(table["references"]) == ["expert", "constant-velocity", "route_follower", "constant_speed"]
    for name in ("route_follower", "constant_speed"):
        episode = json.loads((out / "references" / name / "straight_10" / "score.json").read_text(encoding="utf-8"))
        assert episode["mode"] == "driver" and name in episode["model"]
        assert episode["plans"]["valid"] > 10 and table["references"][name]["mean"]["pdms"] is not None
    assert "| scenario | model | expert | constant-velocity | route_follower | constant_speed |" in first.stdout
    assert again.returncode == 0 and "running" not in again.stderr, again.stderr[-3000:]
    refused = subprocess.run(
        [*command[:-2], "--reference-driver", "expert=127.0.0.1:1"], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and "--reference-driver" in refused.stderr
