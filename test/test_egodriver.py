"""The planner as an egodriver policy (``wam_diff2_ros/egodriver``), served over real gRPC (loopback TCP and unix
sockets) by ``carla-driver-interface``'s server and driven by its ``FakeLoop`` or by a small runtime of the test's
own (:class:`Runtime`) that sends what AlpaSim sends: cameras, egomotion, routes, frames, drive calls.

The tiny model (never a valid plan) and the demo model run the fake loop for 50 steps each over both transports;
the scripted engine (``scripted_engine.py``: the prompt's command shapes its answer) checks the route's command,
the fallback after rejected answers, bad input and sessions side by side.
"""

from __future__ import annotations

import io
import math
import pickle
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("carla_driver_interface")

import grpc
from carla_driver_interface.contract import contract_metadata, negotiate
from carla_driver_interface.geometry import Pose, Trajectory, waypoints_to_proto
from carla_driver_interface.protocol import (
    CarlaVehicleServiceStub,
    DriveRequest,
    DriveSessionCloseRequest,
    DriveSessionRequest,
    DynamicState,
    EgodriverServiceStub,
    RolloutCameraImage,
    RolloutEgoTrajectory,
    Route,
    RouteRequest,
    Vec3,
    VehicleCommandRequest,
    channel_options,
    unpack_debug_info,
)
from carla_driver_interface.server import build_server
from carla_driver_interface.testing import FakeCamera, FakeLoop
from core_helpers import wait_until
from scripted_engine import ScriptedEngine, ScriptedGeneration

from wam_diff2_ros.core.kinematics import COMFORTABLE_DECEL_MPS2
from wam_diff2_ros.egodriver.plan import LocalPlan, comfortable_stop
from wam_diff2_ros.egodriver.policy import WamDiff2Driver
from wam_diff2_ros.egodriver.session import SOURCE_NEW_PLAN, SOURCE_PLAN_IN_FORCE, SOURCE_STOP

pytestmark = pytest.mark.ros

CAMERA = FakeCamera(logical_id="camera_front", width=96, height=64)
STEP_US = 100_000


# ---- serving


class Served:
    """A policy served on a loopback TCP port or a unix socket; ``address`` is what a client dials."""

    def __init__(self, policy: Any, transport: str, tmp: Path, mode: str = "carla") -> None:
        host = f"unix:{tmp / f'{uuid.uuid4().hex[:8]}.sock'}" if transport == "unix" else "127.0.0.1"
        self.server, port = build_server(policy, port=0, host=host, max_workers=4, mode=mode)
        self.server.start()
        self.address = host if transport == "unix" else f"127.0.0.1:{port}"

    def close(self) -> None:
        self.server.stop(grace=None).wait()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    served: list[Served] = []

    def start(policy: Any, transport: str = "tcp", mode: str = "carla") -> str:
        served.append(Served(policy, transport, tmp_path, mode))
        return served[-1].address

    yield start
    for item in served:
        item.close()


class RejectingEngine(ScriptedEngine):
    """The scripted engine, answering text the gate rejects from its ``valid_calls + 1``-th plan on."""

    def __init__(self, valid_calls: int) -> None:
        super().__init__()
        self.valid_calls = valid_calls
        self.plans = 0

    def generate(self, prompt: str, *args: Any, **kwargs: Any) -> Any:
        if "navigation information is" in prompt:
            self.plans += 1
            if self.plans > self.valid_calls:
                return ScriptedGeneration("I will not plan today")
        return super().generate(prompt, *args, **kwargs)


class BlockingEngine(ScriptedEngine):
    """The scripted engine; once ``armed``, a plan waits in the engine until the test sets ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def generate(self, prompt: str, *args: Any, **kwargs: Any) -> Any:
        if self.armed and "navigation information is" in prompt:
            self.entered.set()
            assert self.release.wait(30), "the test never released the engine"
        return super().generate(prompt, *args, **kwargs)


def scripted_policy(engine: Any = None, **kwargs: Any) -> WamDiff2Driver:
    return WamDiff2Driver(model="tiny", device="cpu", engine=engine or ScriptedEngine(), **kwargs)


@pytest.fixture(scope="module")
def tiny_policy() -> WamDiff2Driver:
    # one plan per simulated second and a short token budget: the tiny model's decodes are slow and never valid
    return WamDiff2Driver(model="tiny", device="cpu", plan_interval_s=1.0, overrides={"decoding.max_new_tokens": 32})


@pytest.fixture(scope="module")
def demo_policy() -> WamDiff2Driver:
    return WamDiff2Driver(model="demo", device="cpu", plan_interval_s=1.0)


# ---- a runtime of the test's own


def jpeg(width: int = 96, height: int = 64, shade: int = 90) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (shade, shade, shade)).save(buffer, format="JPEG")
    return buffer.getvalue()


class Runtime:
    """One session as AlpaSim runs it: the ego at ``x = speed · t`` on the local x axis."""

    def __init__(self, address: str, cameras: tuple[FakeCamera, ...] = (CAMERA,)) -> None:
        self.channel = grpc.insecure_channel(address, options=channel_options())
        self.stub = EgodriverServiceStub(self.channel)
        self.vehicle = CarlaVehicleServiceStub(self.channel)
        self.session = str(uuid.uuid4())
        self.cameras = cameras

    def start(self) -> None:
        _, revision = negotiate(self.stub, timeout=10)
        request = DriveSessionRequest(session_uuid=self.session, random_seed=1)
        request.rollout_spec.vehicle.available_cameras.extend(c.available_camera(revision) for c in self.cameras)
        self.stub.start_session(request, timeout=10, metadata=contract_metadata(revision))

    def egomotion(self, t_us: int, x: float, speed: float, accel: float | None = None) -> None:
        state = DynamicState(linear_velocity=Vec3(x=speed, y=0.0, z=0.0))
        if accel is not None:
            state.linear_acceleration.CopyFrom(Vec3(x=accel, y=0.0, z=0.0))
        request = RolloutEgoTrajectory(session_uuid=self.session)
        request.trajectory.CopyFrom(Trajectory([t_us], [Pose.from_xyz_yaw(x, 0.0, 0.0, 0.0)]).to_proto())
        request.dynamic_states.append(state)
        self.stub.submit_egomotion_observation(request, timeout=10)

    def image(self, t_us: int, data: bytes, logical_id: str = CAMERA.logical_id) -> None:
        request = RolloutCameraImage(session_uuid=self.session)
        request.camera_image.logical_id = logical_id
        request.camera_image.frame_start_us = t_us
        request.camera_image.frame_end_us = t_us
        request.camera_image.image_bytes = data
        self.stub.submit_image_observation(request, timeout=10)

    def route(self, t_us: int, points_in_rig: np.ndarray) -> None:
        route = Route(timestamp_us=t_us, waypoints=waypoints_to_proto(np.asarray(points_in_rig, dtype=np.float64)))
        self.stub.submit_route(RouteRequest(session_uuid=self.session, route=route), timeout=10)

    def drive(self, t_us: int) -> tuple[Trajectory, dict[str, float]]:
        request = DriveRequest(session_uuid=self.session, time_now_us=t_us, time_query_us=t_us + STEP_US)
        response = self.stub.drive(request, timeout=60)
        debug = unpack_debug_info(response.debug_info.unstructured_debug_info)
        return Trajectory.from_proto(response.trajectory), dict(debug.scalars) if debug is not None else {}

    def indicator(self) -> int:
        return int(self.vehicle.get_vehicle_command(VehicleCommandRequest(session_uuid=self.session)).turn_indicator)

    def step(self, k: int, speed: float = 3.0, route: np.ndarray | None = None) -> tuple[Trajectory, dict[str, float]]:
        """Egomotion, route, a frame and a drive at step ``k``."""
        t_us = k * STEP_US
        self.egomotion(t_us, speed * t_us / 1e6, speed, accel=0.0)
        if route is not None:
            self.route(t_us, route)
        self.image(t_us, jpeg())
        return self.drive(t_us)

    def close(self) -> None:
        self.stub.close_session(DriveSessionCloseRequest(session_uuid=self.session), timeout=10)
        self.channel.close()


def route_turning(side: float) -> np.ndarray:
    """A route in the rig frame: straight for 10 m, then bending ``side`` (+1 left, -1 right, 0 straight)."""
    x = np.arange(0.0, 60.0, 2.0)
    y = side * np.clip(x - 10.0, 0.0, None) * 0.4
    return np.stack([x, y, np.zeros_like(x)], axis=1)


def errors(scalars: dict[str, float]) -> list[str]:
    return [key for key in scalars if key.startswith("error: ")]


def starts_at_ego(trajectory: Trajectory, t_us: int, ego: Pose) -> bool:
    first = trajectory.poses[0]
    return (
        trajectory.timestamps_us[0] == t_us
        and np.allclose(first.position, ego.position, atol=1e-6)
        and abs(math.remainder(first.yaw - ego.yaw, math.tau)) < 1e-6
    )


# ---- the fake loop, real models


class Recorder(grpc.UnaryUnaryClientInterceptor):
    """Keeps every drive call's response (the fake loop keeps only the ego's path)."""

    def __init__(self) -> None:
        self.drives: list[tuple[int, Any]] = []

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        outcome = continuation(details, request)
        if details.method.endswith("/drive"):
            self.drives.append((int(request.time_now_us), outcome.result()))
        return outcome


def run_fake_loop(
    address: str, steps: int, speed: float = 3.0, camera: FakeCamera = CAMERA
) -> tuple[Any, list[tuple[int, Any]]]:
    recorder = Recorder()
    channel = grpc.intercept_channel(grpc.insecure_channel(address, options=channel_options()), recorder)
    try:
        with FakeLoop(channel, [camera], initial_speed_mps=speed, timeout_s=120) as loop:
            return loop.run(steps), recorder.drives
    finally:
        channel.close()


@pytest.mark.slow  # the models' load (about 15 s each, once per module) and their decodes on a CPU
@pytest.mark.parametrize("transport", ["tcp", "unix"])
@pytest.mark.parametrize("model", ["tiny", "demo"])
def test_the_fake_loop_drives_the_served_model(model: str, transport: str, serve: Any, request: Any) -> None:
    policy = request.getfixturevalue(f"{model}_policy")
    # the demo model answers well at 320 x 180 (at 96 x 64 its answers on the fake road are mostly rejected)
    camera = FakeCamera(logical_id="camera_front", width=320, height=180) if model == "demo" else CAMERA
    result, drives = run_fake_loop(serve(policy, transport), 50, camera=camera)
    assert result.steps == 50 and not result.terminated_by_policy
    assert len(drives) == 50
    scalars = [dict(d.scalars) for d in result.debug]
    for (t_us, response), ego_t, ego in zip(drives, result.ego.timestamps_us, result.ego.poses, strict=True):
        plan = Trajectory.from_proto(response.trajectory)
        assert t_us == ego_t and len(plan) >= 2
        assert starts_at_ego(plan, t_us, ego), f"the plan at {t_us} us does not start at the ego"
        assert all(b > a for a, b in zip(plan.timestamps_us, plan.timestamps_us[1:], strict=False))
        assert np.all(np.isfinite(plan.positions))
    planned = [s for s in scalars if s.get("planned") == 1.0]
    assert 4 <= len(planned) <= 6  # one plan per simulated second (plan_interval_s 1) over 5 s
    assert all("latency_ms" in s and "valid" in s and "confidence" in s for s in planned)
    if model == "tiny":  # random weights: every answer is rejected, with its reason; the car stops safely
        assert all(s["valid"] == 0.0 and any(k.startswith("rejected: ") for k in s) for s in planned)
        assert all(s["source"] == SOURCE_STOP for s in scalars)
        assert result.speeds_mps[-1] < result.speeds_mps[0]
    else:  # the trained demo model plans on the fake road's images, and its plans drive the car on
        assert sum(s["valid"] == 1.0 for s in planned) >= len(planned) // 2
        assert any(s["source"] == SOURCE_NEW_PLAN for s in scalars)
        assert result.ego.positions[-1][0] > 5.0 and abs(result.ego.positions[-1][1]) < 1.75  # in its lane


# ---- the route's command


@pytest.mark.parametrize(("side", "command"), [(1.0, 0.0), (0.0, 1.0), (-1.0, 2.0)])
def test_the_route_gives_the_prompts_command(side: float, command: float, serve: Any) -> None:
    engine = ScriptedEngine()
    runtime = Runtime(serve(scripted_policy(engine)))
    runtime.start()
    for k in range(4):
        plan, scalars = runtime.step(k, route=route_turning(side))
    runtime.close()
    assert scalars["command"] == command and scalars["source"] == SOURCE_NEW_PLAN
    prompt = engine.calls[-1]["prompt"]
    assert f"navigation information is: {['left', 'straight', 'right'][int(command)]}" in prompt
    lateral = plan.positions[-1][1]  # the scripted answer bends the way the command says
    assert (lateral > 0.5) if side > 0 else (lateral < -0.5) if side < 0 else abs(lateral) < 1e-6


@pytest.mark.parametrize(("side", "indicator"), [(1.0, 2), (0.0, 1), (-1.0, 3)])
def test_the_vehicle_command_carries_the_turn_indicator(side: float, indicator: int, serve: Any) -> None:
    runtime = Runtime(serve(scripted_policy()))
    runtime.start()
    runtime.step(0, route=route_turning(side))
    assert runtime.indicator() == indicator
    runtime.close()


def test_without_a_route_the_default_command_plans(serve: Any) -> None:
    engine = ScriptedEngine()
    runtime = Runtime(serve(scripted_policy(engine)))
    runtime.start()
    for k in range(4):
        _, scalars = runtime.step(k)
    runtime.close()
    assert scalars["source"] == SOURCE_NEW_PLAN and scalars["command"] == 1.0  # command.default: straight
    assert "navigation information is: straight" in engine.calls[-1]["prompt"]


def test_the_route_rule_parameters_are_the_policys(serve: Any) -> None:
    # a bend 10 m ahead: left with a 5 m look-ahead and 2 m threshold, straight with the defaults (20 m, 3 m)
    x = np.arange(0.0, 40.0, 1.0)
    route = np.stack([x, np.where(x < 5.0, 0.0, 2.5), np.zeros_like(x)], axis=1)
    near = Runtime(serve(scripted_policy(route_lookahead_m=5.0, route_lateral_threshold_m=2.0)))
    default = Runtime(serve(scripted_policy()))
    for runtime, expected in ((near, 0.0), (default, 1.0)):
        runtime.start()
        _, scalars = runtime.step(0, route=route)
        assert scalars["command"] == expected
        runtime.close()


# ---- the fallback after rejected answers


def test_rejected_answers_keep_the_plan_in_force_then_stop_comfortably(serve: Any) -> None:
    engine = RejectingEngine(valid_calls=1)
    result, drives = run_fake_loop(serve(scripted_policy(engine)), 75, speed=2.0)
    scalars = [dict(d.scalars) for d in result.debug]
    sources = [s["source"] for s in scalars]
    first = sources.index(SOURCE_NEW_PLAN)  # the first plan needs three odometry samples (derived acceleration)
    assert first == 2 and sources[:first] == [SOURCE_STOP] * first
    # the plan made from the frame at 0.2 s holds until its last waypoint (0.2 + 8 x 0.5 s) covers the next step
    in_force = [k for k, s in enumerate(sources) if s == SOURCE_PLAN_IN_FORCE]
    assert in_force == list(range(first + 1, 42))
    assert all(s.get("valid") == 0.0 and any(k.startswith("rejected: ") for k in s) for s in scalars[first + 1 :])
    assert sources[42:] == [SOURCE_STOP] * (75 - 42)
    # re-timed, the plan in force is the same path at the same times: the ego keeps the speed the plan was made at
    # (the scripted answer runs at the prompt's speed; the two stop steps before it slowed the ego to 1.7 m/s: the
    # fake loop reports each step's mean speed, 1.9 and 1.7 m/s at 2 m/s²)
    assert result.speeds_mps[first] == pytest.approx(1.7, abs=1e-3)
    assert np.allclose(result.speeds_mps[first + 1 : 42], result.speeds_mps[first], atol=1e-3)
    # then a stop, held: at the comfortable deceleration (0.2 m/s per 0.1 s step) down to standing, never harder
    stop_speeds = np.array(result.speeds_mps[42:])
    drops = -np.diff(stop_speeds)
    assert np.all(drops >= -1e-4) and np.all(drops <= COMFORTABLE_DECEL_MPS2 * 0.1 + 1e-4)  # float32 on the wire
    assert np.allclose(drops[1:8], COMFORTABLE_DECEL_MPS2 * 0.1, atol=1e-3)
    assert stop_speeds[-1] < 0.01
    for (t_us, response), ego in zip(drives, result.ego.poses, strict=True):
        assert starts_at_ego(Trajectory.from_proto(response.trajectory), t_us, ego)


# ---- bad input


def test_a_drive_before_any_frame_is_an_error_and_a_stop(serve: Any) -> None:
    runtime = Runtime(serve(scripted_policy()))
    runtime.start()
    runtime.egomotion(0, 0.0, 4.0)
    plan, scalars = runtime.drive(0)
    assert any("no frame from camera 'camera_front' yet" in e for e in errors(scalars))
    assert scalars["source"] == SOURCE_STOP and scalars["planned"] == 0.0
    assert plan.positions[-1][0] == pytest.approx(4.0**2 / (2 * COMFORTABLE_DECEL_MPS2), abs=1e-6)
    runtime.close()


def test_undecodable_image_bytes_are_an_error_and_the_server_keeps_serving(serve: Any) -> None:
    address = serve(scripted_policy())
    bad, good = Runtime(address), Runtime(address)
    bad.start()
    good.start()
    for k in range(4):
        t_us = k * STEP_US
        bad.egomotion(t_us, 3.0 * t_us / 1e6, 3.0, accel=0.0)
        bad.image(t_us, b"\x00\x01 certainly not an image")
        plan, scalars = bad.drive(t_us)
        assert any("neither JPEG nor PNG" in e for e in errors(scalars)), scalars
        assert scalars["source"] == SOURCE_STOP and len(plan) >= 2
        _, fine = good.step(k)
    assert fine["source"] == SOURCE_NEW_PLAN and not errors(fine)
    bad.close()
    good.close()


def test_a_truncated_jpeg_is_an_error(serve: Any) -> None:
    runtime = Runtime(serve(scripted_policy()))
    runtime.start()
    for k in range(4):
        t_us = k * STEP_US
        runtime.egomotion(t_us, 0.3 * k, 3.0, accel=0.0)
        runtime.image(t_us, jpeg()[:40])
        _, scalars = runtime.drive(t_us)
    assert errors(scalars) and scalars["source"] == SOURCE_STOP
    runtime.close()


def test_an_unknown_logical_id_is_refused_with_a_reason(serve: Any) -> None:
    address = serve(scripted_policy())
    runtime = Runtime(address)
    runtime.start()
    with pytest.raises(grpc.RpcError) as refused:
        runtime.image(0, jpeg(), logical_id="camera_rear")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "camera_rear" in refused.value.details()
    _, scalars = runtime.step(0)  # the session goes on
    assert "source" in scalars
    runtime.close()


def test_a_planning_camera_the_session_does_not_declare_is_refused_at_start(serve: Any) -> None:
    runtime = Runtime(serve(scripted_policy(camera="camera_front_wide_120fov")))
    with pytest.raises(grpc.RpcError) as refused:
        runtime.start()
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "camera_front_wide_120fov" in refused.value.details() and "camera_front" in refused.value.details()


def test_a_chosen_camera_among_several_plans(serve: Any) -> None:
    left = FakeCamera(logical_id="camera_left", width=96, height=64, yaw_left_deg=60.0)
    engine = ScriptedEngine()
    runtime = Runtime(serve(scripted_policy(engine, camera="camera_front")), cameras=(left, CAMERA))
    runtime.start()
    for k in range(4):
        t_us = k * STEP_US
        runtime.egomotion(t_us, 0.3 * k, 3.0, accel=0.0)
        runtime.image(t_us, jpeg(shade=10), logical_id="camera_left")
        runtime.image(t_us, jpeg(shade=200))
        _, scalars = runtime.drive(t_us)
    assert scalars["source"] == SOURCE_NEW_PLAN
    assert int(np.asarray(engine.calls[-1]["images"][0]).mean()) > 150  # the front camera's frame, not the left's
    runtime.close()


def test_a_non_finite_state_is_an_error(serve: Any) -> None:
    runtime = Runtime(serve(scripted_policy()))
    runtime.start()
    for k in range(4):
        t_us = k * STEP_US
        runtime.egomotion(t_us, 0.3 * k, math.nan if k == 3 else 3.0, accel=0.0)
        runtime.image(t_us, jpeg())
        plan, scalars = runtime.drive(t_us)
    assert any("not finite" in e for e in errors(scalars)), scalars
    assert np.all(np.isfinite(plan.positions)) and len(plan) >= 2
    runtime.close()


def test_a_non_finite_pose_is_an_error_and_the_answer_stays_finite(serve: Any) -> None:
    runtime = Runtime(serve(scripted_policy()))
    runtime.start()
    for k in range(4):
        runtime.step(k)
    request = RolloutEgoTrajectory(session_uuid=runtime.session)
    request.trajectory.CopyFrom(Trajectory([4 * STEP_US], [Pose.from_xyz_yaw(math.nan, 0.0, 0.0, 0.0)]).to_proto())
    request.dynamic_states.append(DynamicState(linear_velocity=Vec3(x=3.0)))
    runtime.stub.submit_egomotion_observation(request, timeout=10)
    plan, scalars = runtime.drive(4 * STEP_US)
    assert any("the pose at 400000 us is not finite" in e for e in errors(scalars)), scalars
    assert np.all(np.isfinite(plan.positions)) and scalars["source"] == SOURCE_PLAN_IN_FORCE
    assert np.allclose(plan.positions[0], [0.9, 0.0, 0.0])  # the last finite pose (step 3) anchors the answer
    runtime.close()


def test_a_route_of_one_point_is_an_error_and_the_held_command_stays(serve: Any) -> None:
    runtime = Runtime(serve(scripted_policy()))
    runtime.start()
    for k in range(3):
        runtime.step(k, route=route_turning(1.0))
    _, scalars = runtime.step(3, route=np.array([[5.0, 0.0, 0.0]]))
    assert any("route: a route needs at least 2 points, got 1" in e for e in errors(scalars)), scalars
    assert scalars["command"] == 0.0 and runtime.indicator() == 2  # still left
    runtime.close()


def test_a_session_never_started_is_not_found(serve: Any) -> None:
    runtime = Runtime(serve(scripted_policy()))
    with pytest.raises(grpc.RpcError) as refused:
        runtime.drive(0)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert runtime.session in refused.value.details()


def test_two_sessions_side_by_side_do_not_mix(serve: Any) -> None:
    address = serve(scripted_policy())
    left, right = Runtime(address), Runtime(address)
    left.start()
    right.start()
    for k in range(5):
        left_plan, left_scalars = left.step(k, speed=2.0, route=route_turning(1.0))
        right_plan, right_scalars = right.step(k, speed=6.0, route=route_turning(-1.0))
    assert (left_scalars["command"], right_scalars["command"]) == (0.0, 2.0)
    assert (left.indicator(), right.indicator()) == (2, 3)
    assert left_plan.positions[-1][1] > 0.5 and right_plan.positions[-1][1] < -0.5
    # each plan follows its own session's speed (the scripted answer runs at the prompt's speed for 4 s); the
    # answer is in the local frame, where the ego of step 4 stands at x = speed x 0.4 s
    assert left_plan.positions[-1][0] == pytest.approx(2.0 * 0.4 + 2.0 * 4.0, abs=1e-3)
    assert right_plan.positions[-1][0] == pytest.approx(6.0 * 0.4 + 6.0 * 4.0, abs=1e-3)
    left.close()
    right.close()


@pytest.mark.parametrize("cadence", ["free", "wait"])
def test_a_busy_model_is_waited_for_at_most_once(cadence: str, serve: Any) -> None:
    engine = BlockingEngine()
    policy = scripted_policy(engine, cadence=cadence)
    address = serve(policy)
    first, second = Runtime(address), Runtime(address)
    first.start()
    second.start()
    for k in range(3):
        first.step(k)
        second.step(k)
    engine.armed = True
    answers: dict[str, dict[str, float]] = {}
    busy = threading.Thread(target=lambda: answers.update(first=first.step(3)[1]))
    busy.start()
    assert engine.entered.wait(30)  # the first session's plan is in the model now
    if cadence == "free":  # the second session does not wait: the plan in force answers at once
        _, answers["second"] = second.step(3)
        engine.release.set()
    else:  # the second session waits for that one call, then plans
        waiting = threading.Thread(target=lambda: answers.update(second=second.step(3)[1]))
        waiting.start()
        assert wait_until(lambda: policy.gate.waiting == 1, 30)
        engine.release.set()
        waiting.join(30)
    busy.join(30)
    assert answers["first"]["planned"] == 1.0 and answers["first"]["source"] == SOURCE_NEW_PLAN
    if cadence == "free":
        assert answers["second"]["planned"] == 0.0 and answers["second"]["source"] == SOURCE_PLAN_IN_FORCE
        assert any("the model is busy" in key for key in answers["second"])
    else:
        assert answers["second"]["planned"] == 1.0 and answers["second"]["source"] == SOURCE_NEW_PLAN
    first.close()
    second.close()


# ---- the alpasim payload, the candidates


def test_alpasim_mode_answers_alpasims_pickled_debug_info(serve: Any) -> None:
    runtime = Runtime(serve(scripted_policy(), mode="alpasim"))
    runtime.start()
    for k in range(4):
        runtime.step(k)
    request = DriveRequest(session_uuid=runtime.session, time_now_us=3 * STEP_US, time_query_us=4 * STEP_US)
    response = runtime.stub.drive(request, timeout=10)
    payload = pickle.loads(response.debug_info.unstructured_debug_info)
    assert payload["policy_name"] == "wam_diff2" and payload["scalars"]["source"] == SOURCE_PLAN_IN_FORCE
    runtime.close()


def test_candidates_are_the_sampled_trajectories(serve: Any) -> None:
    policy = scripted_policy(overrides={"planning.candidates": 3, "planning.candidate_temperature": 0.7})
    runtime = Runtime(serve(policy))
    runtime.start()
    for k in range(4):
        t_us = k * STEP_US
        runtime.egomotion(t_us, 0.3 * k, 3.0, accel=0.0)
        runtime.image(t_us, jpeg())
        response = runtime.stub.drive(
            DriveRequest(session_uuid=runtime.session, time_now_us=t_us, time_query_us=t_us + STEP_US), timeout=10
        )
    sampled = [Trajectory.from_proto(t) for t in response.debug_info.sampled_trajectories]
    assert len(sampled) == 3  # the scripted engine's three answers, all valid
    assert all(t.timestamps_us[0] == 3 * STEP_US and len(t) == 9 for t in sampled)
    runtime.close()


# ---- the plan in force and the stop, without gRPC


def test_a_plan_in_force_is_retimed_to_now_in_the_rig_frame() -> None:
    from wam_diff2_ros.core.parsing import Waypoint

    waypoints = [Waypoint(0.5 * (i + 1), 1.0 * (i + 1), 0.0, 0.0) for i in range(8)]
    plan = LocalPlan.from_waypoints(waypoints, 1_000_000, Pose.from_xyz_yaw(10.0, 5.0, 0.0, math.pi / 2))
    anchor = Pose.from_xyz_yaw(10.0, 6.2, 0.0, math.pi / 2)  # 1.2 m further along the plan, 0.6 s later
    retimed = plan.retimed(1_600_000, anchor, 1_700_000)
    assert retimed is not None
    assert retimed.timestamps_us == [1_600_000, *[1_000_000 + 500_000 * i for i in range(2, 9)]]
    assert np.allclose(retimed.positions[1], [0.8, 0.0, 0.0], atol=1e-9)  # the 2 m waypoint, 0.8 m ahead
    assert plan.retimed(4_950_000, anchor, 5_050_000) is None  # the last waypoint (5 s) is before the query


def test_a_comfortable_stop_follows_the_path_and_brakes_at_the_comfortable_rate() -> None:
    path = np.array([[2.0, 0.0], [4.0, 1.0], [6.0, 3.0]])
    stop = comfortable_stop(0, 4.0, path)
    distances = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(stop.positions[:, :2], axis=0).T))])
    times = np.array(stop.timestamps_us) / 1e6
    expected = 4.0 * np.minimum(times, 2.0) - 0.5 * COMFORTABLE_DECEL_MPS2 * np.minimum(times, 2.0) ** 2
    assert np.allclose(distances, expected, atol=0.05)  # arc length along the bending path
    # standing after 4 m: 2 m straight, then 2 m along the segment to (4, 1)
    assert times[-1] >= 4.0 and stop.positions[-1][:2] == pytest.approx([2.0 + 4.0 / math.sqrt(5), 2.0 / math.sqrt(5)])


# ---- the console script's refusals (nothing is served)


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["--model", "tiny"], 2, "one of the arguments --port --socket --fake-loop is required"),
        (["--model", "tiny", "--port", "1", "--socket", "x.sock"], 2, "not allowed with"),
        (["--model", "tiny", "--port", "70000"], 2, "--port must be <= 65535"),
        (["--model", "/nonexistent/checkpoint", "--port", "0"], 3, "not a directory"),
        (["--model", "tiny", "--port", "0", "--params", "/nonexistent.yaml"], 3, "parameter file /nonexistent.yaml"),
        (["--model", "tiny", "--port", "0", "--route-lookahead", "-1"], 3, "lookahead_m must be"),
        (["--model", "tiny", "--fake-loop", "5", "--size", "10x10"], 2, "--size 10x10"),
    ],
)
def test_the_console_script_refuses_bad_arguments(argv: list[str], code: int, says: str, capsys: Any) -> None:
    from wam_diff2_ros.cli.egodriver import main

    assert main(argv) == code
    assert says in capsys.readouterr().err
