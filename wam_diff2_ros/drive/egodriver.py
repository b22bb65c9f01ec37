"""The same episode with any egodriver policy over gRPC (:class:`EgodriverEpisode`, ``wam-diff2-drive --driver``):
the simulator plays AlpaSim's runtime side of ``egodriver.EgodriverService`` (the stubs of
``carla-driver-interface``), so this package's policy, ``carla-driver-interface``'s reference policies and any other
policy served over that contract drive through the same world, controller and score as the in-process planner.

What the policy is sent, in AlpaSim's order and frames (the ``local`` frame is the world; the rig frame is the
ego's: x forward, y left, z up, origin on the ground below the rear axle — the vehicle's reference point here):

* ``get_version`` (the contract revision and the policy's name), then ``start_session`` with one camera,
  :data:`CAMERA_ID`: the renderer's pinhole intrinsics and its optical frame in the rig;
* ``submit_egomotion_observation``: the ego's poses in ``local`` of every 20 ms tick since the last submission,
  with their rig-frame dynamic state (velocity, acceleration, yaw rate), before each frame and each ``drive``;
* every 100 ms: ``submit_image_observation`` (the rendered frame as JPEG) and ``submit_route``, the ego lane's
  centre from the ego to :data:`ROUTE_AHEAD_M` ahead every :data:`ROUTE_STEP_M`, in the rig frame at that instant
  (the policy derives left / straight / right from it; the world's own command is not sent);
* ``drive(time_now_us, time_query_us = time_now_us + 100 ms)`` after each frame when the policy is free (AlpaSim's
  10 Hz cadence); the answer, timed poses in ``local`` led by the ego at ``time_now_us``, goes to the tracker as
  a plan that takes effect after the call's measured wall time (or ``--latency-ms``), as an in-process plan does;
  fewer than two poses, times not increasing or a coordinate not finite make an invalid plan (the plan in force
  goes on, then the controller's comfortable stop). A policy that says its model's answer was rejected (debug
  values ``valid`` 0 and ``rejected: <reason>``, as this package's policy sends them) is counted as a rejected plan
  with that reason and its answer (its plan in force re-timed, or a comfortable stop) is not submitted: the
  controller applies its own rule, which that fallback mirrors (the plan in force while it lasts, then the
  comfortable stop), and before the first valid plan the safe start (the comfortable stop) applies, as in-process;
* ``close_session`` at the end.

A gRPC error on ``drive`` counts as a failed plan, as an engine error in-process (three in a row end the episode).
"""

from __future__ import annotations

import io
import math
import pickle
import time
import uuid
from typing import Any

import numpy as np

from wam_diff2_ros.drive.controller import PlanTrack
from wam_diff2_ros.drive.episode import CAMERA_EVERY, TICK_NS, Episode, PlanRecord
from wam_diff2_ros.drive.vehicle import VehicleState
from wam_diff2_ros.sim.road import CAMERA_PITCH_RAD, CAMERA_X_M, CAMERA_Z_M

CAMERA_ID = "camera_front"
ROUTE_AHEAD_M = 120.0
ROUTE_STEP_M = 2.0
QUERY_AHEAD_US = CAMERA_EVERY * TICK_NS // 1000  # 100 ms: AlpaSim's control step
RPC_TIMEOUT_S = 120.0


class DriverError(RuntimeError):
    """The policy cannot be reached or refused the session."""


class EgodriverEpisode(Episode):
    """:class:`Episode` with an egodriver policy at ``address`` (``HOST:PORT`` or ``unix:PATH``) as the planner."""

    def __init__(self, *args: Any, address: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        import grpc
        from carla_driver_interface.contract import ContractError, negotiate
        from carla_driver_interface.protocol import EgodriverServiceStub, channel_options

        self.rows = {}  # nothing goes to the in-process runtime; the recorder still gets every message
        self.address = address
        self.channel = grpc.insecure_channel(address, options=channel_options())
        self.stub = EgodriverServiceStub(self.channel)
        try:
            version, self.revision = negotiate(self.stub, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as exc:
            self.channel.close()
            raise DriverError(f"no egodriver policy at {address}: {_rpc_text(exc)}") from None
        except ContractError as exc:
            self.channel.close()
            raise DriverError(f"the policy at {address}: {exc}") from None
        self.policy_version = str(version.version_id)
        self.session = ""
        self.pending_poses: list[tuple[int, VehicleState, float]] = []  # stamp (us), state, yaw rate

    @property
    def planner_label(self) -> str:
        """``driver: <address> (<policy's version id>)``, the planner's name in score.json."""
        return f"driver: {self.address} ({self.policy_version})"

    # ---- the session

    def start_session(self) -> None:
        """``start_session`` with the front camera (:class:`DriverError` when the policy refuses it)."""
        import grpc
        from carla_driver_interface.contract import contract_metadata
        from carla_driver_interface.protocol import DriveSessionRequest

        self.session = str(uuid.uuid4())
        request = DriveSessionRequest(session_uuid=self.session, random_seed=int(self.spec.seed))
        request.debug_info.scene_id = f"wam-diff2-drive:{self.spec.name}"
        request.rollout_spec.vehicle.available_cameras.append(self._camera_declaration())
        try:
            self.stub.start_session(request, timeout=RPC_TIMEOUT_S, metadata=contract_metadata(self.revision))
        except grpc.RpcError as exc:
            self.session = ""
            raise DriverError(f"the policy at {self.address} refused the session: {_rpc_text(exc)}") from None

    def _camera_declaration(self) -> Any:
        """The renderer's camera as the contract's ``AvailableCamera`` (revision the server speaks)."""
        from carla_driver_interface.contract import CONTRACT_REVISION, camera_to_revision
        from carla_driver_interface.geometry import Pose, body_to_optical
        from carla_driver_interface.protocol import AvailableCamera, CameraSpec, OpenCVPinholeCameraParam, ShutterType

        cam = self.renderer.cam
        spec = CameraSpec(
            opencv_pinhole_param=OpenCVPinholeCameraParam(
                principal_point_x=cam.cx, principal_point_y=cam.cy, focal_length_x=cam.fx, focal_length_y=cam.fy
            ),
            logical_id=CAMERA_ID,
            resolution_w=cam.width,
            resolution_h=cam.height,
            shutter_type=ShutterType.GLOBAL,
        )
        body = Pose(
            [CAMERA_X_M, 0.0, CAMERA_Z_M], [0.0, math.sin(CAMERA_PITCH_RAD / 2), 0.0, math.cos(CAMERA_PITCH_RAD / 2)]
        )
        camera = AvailableCamera(intrinsics=spec, rig_to_camera=body_to_optical(body).to_proto(), logical_id=CAMERA_ID)
        return camera_to_revision(camera, CONTRACT_REVISION, self.revision)

    def close(self) -> None:
        """``close_session`` (when one is open) and the channel."""
        import grpc
        from carla_driver_interface.protocol import DriveSessionCloseRequest

        if self.session:
            try:
                self.stub.close_session(DriveSessionCloseRequest(session_uuid=self.session), timeout=10.0)
            except grpc.RpcError as exc:
                self.log(f"warning: close_session failed: {_rpc_text(exc)}")
            self.session = ""
        self.channel.close()

    # ---- what the policy observes

    def _feed_motion(self, stamp_ns: int, state: VehicleState, yaw_rate: float) -> None:
        super()._feed_motion(stamp_ns, state, yaw_rate)  # the bag's odometry and acceleration
        self.pending_poses.append((stamp_ns // 1000, state, yaw_rate))

    def _submit_egomotion(self) -> None:
        from carla_driver_interface.geometry import Pose, Trajectory
        from carla_driver_interface.protocol import DynamicState, RolloutEgoTrajectory, Vec3

        if not self.pending_poses:
            return
        poses = Trajectory.empty()
        request = RolloutEgoTrajectory(session_uuid=self.session)
        for stamp_us, state, yaw_rate in self.pending_poses:
            poses.append(stamp_us, Pose.from_xyz_yaw(state.x, state.y, 0.0, state.yaw))
            request.dynamic_states.append(
                DynamicState(
                    linear_velocity=Vec3(x=state.v, y=0.0, z=0.0),
                    angular_velocity=Vec3(x=0.0, y=0.0, z=yaw_rate),
                    linear_acceleration=Vec3(x=state.a, y=state.v * yaw_rate, z=0.0),
                )
            )
        request.trajectory.CopyFrom(poses.to_proto())
        self.stub.submit_egomotion_observation(request, timeout=RPC_TIMEOUT_S)
        self.pending_poses.clear()

    def _camera(self, now_ns: int, state: VehicleState, near_s: float) -> None:
        import cv2
        import grpc
        from carla_driver_interface.geometry import waypoints_to_proto
        from carla_driver_interface.protocol import RolloutCameraImage, Route, RouteRequest

        from wam_diff2_ros.drive import messages

        started = time.perf_counter()
        s, _ = self.world.frenet(state.x, state.y, near_s)
        rgb = self.renderer.render_from(self._t(now_ns), state.x, state.y, state.yaw, float(s[0]))
        self.render_s += time.perf_counter() - started
        self._feed("camera_info", messages.camera_info(now_ns, self.renderer.cam), now_ns, "/camera/front/camera_info")
        ok, jpeg = cv2.imencode(".jpg", np.ascontiguousarray(rgb[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, 90])
        if not ok:
            raise RuntimeError("OpenCV could not encode a JPEG")
        if self.recorder is not None:
            self.recorder.write("/camera/front/image_raw/compressed", messages.jpeg(now_ns, rgb), now_ns)
        now_us = now_ns // 1000
        image = RolloutCameraImage(session_uuid=self.session)
        image.camera_image.logical_id = CAMERA_ID
        image.camera_image.frame_start_us = image.camera_image.frame_end_us = now_us
        image.camera_image.image_bytes = jpeg.tobytes()
        route = Route(timestamp_us=now_us, waypoints=waypoints_to_proto(self._route_in_rig(state, float(s[0]))))
        try:
            self._submit_egomotion()
            self.stub.submit_image_observation(image, timeout=RPC_TIMEOUT_S)
            self.stub.submit_route(RouteRequest(session_uuid=self.session, route=route), timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as exc:  # reported; the drive that follows fails too and counts
            self.log(f"error: observations at t={self._t(now_ns):.2f} s not taken: {_rpc_text(exc)}")
        self.pending = True  # drive after each frame (when the policy is free)

    def _route_in_rig(self, state: VehicleState, s: float) -> np.ndarray:
        """The ego lane's centre from ``s`` to :data:`ROUTE_AHEAD_M` ahead (to the road's end), (N, 3) in the rig."""
        end = self.world.road.segments[-1].s0 + self.world.road.segments[-1].length
        ahead = np.arange(s, min(s + ROUTE_AHEAD_M, end), ROUTE_STEP_M)
        if len(ahead) < 2:
            ahead = np.array([s, s + ROUTE_STEP_M])
        x, y, _ = self.world.road.frenet_to_world(ahead, 0.0)
        c, n = math.cos(state.yaw), math.sin(state.yaw)
        dx, dy = np.asarray(x) - state.x, np.asarray(y) - state.y
        return np.stack([c * dx + n * dy, -n * dx + c * dy, np.zeros(len(ahead))], axis=1)

    # ---- the decision

    def _plan(self, now_ns: int) -> None:
        import grpc
        from carla_driver_interface.protocol import DriveRequest

        self.pending = False
        now_us = now_ns // 1000
        started = time.perf_counter()
        try:
            self._submit_egomotion()
            response = self.stub.drive(
                DriveRequest(session_uuid=self.session, time_now_us=now_us, time_query_us=now_us + QUERY_AHEAD_US),
                timeout=RPC_TIMEOUT_S,
            )
        except grpc.RpcError as exc:
            self.errors += 1
            self.log(f"error: drive at t={self._t(now_ns):.2f} s failed: {_rpc_text(exc)}")
            if self.errors >= 3:
                self.stop_reason = f"the policy failed {self.errors} times in a row ({_rpc_text(exc)})"
            return
        wall_s = time.perf_counter() - started
        self.errors = 0
        self.plan_wall_s += wall_s
        latency_ns = (
            round(self.options.latency_ms * 1e6) if self.options.latency_ms is not None else round(wall_s * 1e9)
        )
        self.busy_until_ns = now_ns + latency_ns
        t_now, effective_s = self._t(now_ns), self._t(now_ns + latency_ns)
        track, reason = self._track(response.trajectory, effective_s, len(self.plans))
        verdict = policy_verdict(debug_scalars(response.debug_info.unstructured_debug_info))
        valid = track is not None and not verdict
        record = PlanRecord(len(self.plans), t_now, t_now, valid, reason or verdict, latency_ns / 1e6, effective_s)
        if valid and track is not None:  # a rejected answer: the controller's own rule (module docstring)
            record.points = [[float(a), float(b)] for a, b in zip(track.x, track.y, strict=True)]
            self.tracker.submit(track)
        self.plans.append(record)
        if response.terminate_session:
            self.stop_reason = "the policy ended the session"

    def _track(self, trajectory: Any, effective_s: float, index: int) -> tuple[PlanTrack | None, str]:
        """The answer's poses (``local``, timed) as a plan in the world, or why it is not one."""
        stamps = np.array([p.timestamp_us for p in trajectory.poses], dtype=np.int64)
        xy = np.array([[p.pose.vec.x, p.pose.vec.y] for p in trajectory.poses], dtype=np.float64).reshape(-1, 2)
        if len(stamps) < 2:
            return None, f"hold: the policy answered {len(stamps)} pose(s), no plan beyond the ego's pose"
        if not np.isfinite(xy).all():
            return None, "the policy's trajectory has a coordinate that is not finite"
        if np.any(np.diff(stamps) <= 0):
            return None, "the policy's trajectory times do not increase"
        t = (stamps * 1000 - self.options.start_ns) / 1e9
        return PlanTrack(t, xy[:, 0].copy(), xy[:, 1].copy(), effective_s, "model", index), ""


class _ScalarsUnpickler(pickle.Unpickler):
    """Unpickles builtin containers and numbers only: no class or function is ever looked up."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a debug payload")


def debug_scalars(payload: bytes) -> dict[str, float]:
    """The policy's debug scalars from ``DriveResponse.debug_info.unstructured_debug_info``: a
    ``CarlaDriveDebugInfo`` (carla mode) or AlpaSim's pickled ``dict`` (alpasim mode, read without loading any
    class); empty for anything else."""
    from carla_driver_interface.protocol import unpack_debug_info

    info = unpack_debug_info(payload)
    if info is not None and (info.policy_name or info.scalars):
        return {str(k): float(v) for k, v in info.scalars.items()}
    try:
        value = _ScalarsUnpickler(io.BytesIO(payload)).load()
    except Exception:  # not a pickle, or one with classes in it: no scalars
        return {}
    scalars = value.get("scalars") if isinstance(value, dict) else None
    if not isinstance(scalars, dict):
        return {}
    return {str(k): float(v) for k, v in scalars.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def policy_verdict(scalars: dict[str, float]) -> str:
    """Why the policy says its model's answer was rejected (its ``valid`` 0 and ``rejected: <reason>`` debug
    values, as this package's policy sends them), "" when it does not say so."""
    if scalars.get("valid", 1.0) != 0.0:
        return ""
    reasons = [key.removeprefix("rejected: ") for key in scalars if key.startswith("rejected: ")]
    return "; ".join(reasons) or "rejected by the policy"


def _rpc_text(exc: Any) -> str:
    """A gRPC error as ``CODE: details``."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code is not None else 'error'}: {details}"
