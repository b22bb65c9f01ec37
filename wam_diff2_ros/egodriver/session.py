"""One egodriver session's planner (:class:`SessionPlanner`): the session's observations fed to its own
:class:`~wam_diff2_ros.ros.runtime.PlannerRuntime` through the node's input table, a plan when a new frame has
arrived and the model is free, and the answer: the new plan, the plan in force re-timed, or a comfortable stop
(:mod:`.plan`).

Each drive first feeds what arrived since the last one, as the node receives messages: every new egomotion pose
as odometry (and its dynamic state's acceleration when it has one), the planning camera's newest frame with its
camera info, and the route's command (:func:`~wam_diff2_ros.core.route_command.route_command`, held by
:class:`~wam_diff2_ros.core.turn_signal.CommandHold`). A message the runtime refuses is an error of that drive
(debug value ``error: ...``), never an exception: the answer is then the plan in force or a stop.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from carla_driver_interface.driver import CameraFrame, DriveContext, DriveResult, SessionState, TurnIndicator
from carla_driver_interface.geometry import Pose, Trajectory

from wam_diff2_ros.core.prompts import NavigationCommand
from wam_diff2_ros.core.route_command import RouteError, RouteRule, route_command
from wam_diff2_ros.core.turn_signal import CommandHold
from wam_diff2_ros.ros.input_rows import InputRow, input_table, receive
from wam_diff2_ros.ros.params import NodeConfig
from wam_diff2_ros.ros.runtime import PlannerRuntime

from . import messages
from .plan import LocalPlan, comfortable_stop

#: ``DriveResult.debug_scalars["source"]``: what the answer is.
SOURCE_NEW_PLAN, SOURCE_PLAN_IN_FORCE, SOURCE_STOP = 0.0, 1.0, 2.0
TURN_INDICATORS: dict[NavigationCommand, TurnIndicator] = {
    NavigationCommand.LEFT: TurnIndicator.ENABLE_LEFT,
    NavigationCommand.RIGHT: TurnIndicator.ENABLE_RIGHT,
    NavigationCommand.STRAIGHT: TurnIndicator.DISABLE,
    NavigationCommand.UNKNOWN: TurnIndicator.NO_COMMAND,
}


@dataclass
class DriveReport:
    """What one drive did, for its debug values."""

    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scalars: dict[str, float] = field(default_factory=dict)

    def debug_scalars(self) -> dict[str, float]:
        """The scalars, then each error and note as a key of value 1 (``error: ...``, ``note: ...``)."""
        values = dict(self.scalars)
        values.update({f"error: {text}": 1.0 for text in self.errors})
        values.update({f"note: {text}": 1.0 for text in self.notes})
        return values


class ModelGate:
    """Who may call the model now (one call at a time, shared by every session of a policy).

    :meth:`acquire` with ``wait=False`` takes the model only when it is free; with ``wait=True`` it waits for the
    call in progress to end (one model call, never more) and takes the model if it is then free."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._busy = False
        self._ended = 0
        self.waiting = 0  # callers waiting for the call in progress to end

    def acquire(self, wait: bool) -> bool:
        """True when the caller now holds the model (it must :meth:`release` it)."""
        with self._condition:
            if self._busy and wait:
                ended = self._ended
                self.waiting += 1
                self._condition.wait_for(lambda: self._ended != ended)
                self.waiting -= 1
            if self._busy:
                return False
            self._busy = True
            return True

    def release(self) -> None:
        """Give the model back."""
        with self._condition:
            self._busy = False
            self._ended += 1
            self._condition.notify_all()


class SessionPlanner:
    """The planner of one session (see the module docstring)."""

    def __init__(
        self,
        session: SessionState,
        config: NodeConfig,
        engine: Any,
        camera: str,
        rule: RouteRule,
        wait: bool = False,
        plan_interval_s: float = 0.0,
    ) -> None:
        self.uuid = session.uuid
        self.camera = camera
        self.config = config
        self.rule = rule
        self.wait = wait
        self.plan_interval_us = round(plan_interval_s * 1e6)
        self.last_plan_frame_us: int | None = None
        self.now_ns = 0
        self.runtime = PlannerRuntime(config, engine, clock=lambda: self.now_ns)
        self.rows: dict[str, InputRow] = {
            row.role: row for row in input_table(config, self.runtime) if row.index in (None, 0)
        }
        self.hold = CommandHold(config.turn_signal_hold_s)
        self.default_command = config.sync.default_command
        self.fed_poses = 0
        self.dropped: list[str] = []  # non-finite egomotion poses taken out of the session, reported at the next drive
        self.last_frame_us: int | None = None
        self.last_route_us: int | None = None
        self.plan: LocalPlan | None = None
        self.stop: LocalPlan | None = None  # the stop in force, once the plan in force has run out
        self.candidates: tuple[LocalPlan, ...] = ()
        self.plan_stamp_us = 0
        self.lock = threading.Lock()

    # ---- feeding

    def drop_non_finite_poses(self, session: SessionState) -> None:
        """Take the egomotion poses that are not finite (and their states) out of the session as they arrive, so the
        latest pose, which anchors every answer, stays a finite one; each is reported at the next drive."""
        with session.lock:
            trajectory = session.ego_trajectory
            keep = [k < self.fed_poses or _finite(pose) for k, pose in enumerate(trajectory.poses)]
            if all(keep):
                return
            for k, kept in enumerate(keep):
                if not kept:
                    self.dropped.append(f"egomotion: the pose at {trajectory.timestamps_us[k]} us is not finite")
            trajectory.timestamps_us[:] = [t for t, kept in zip(trajectory.timestamps_us, keep, strict=True) if kept]
            trajectory.poses[:] = [p for p, kept in zip(trajectory.poses, keep, strict=True) if kept]
            if len(session.dynamic_states) == len(keep):
                session.dynamic_states[:] = [d for d, kept in zip(session.dynamic_states, keep, strict=True) if kept]

    def _feed(self, role: str, msg: Any, stamp: int, report: DriveReport) -> None:
        problem = receive(self.rows[role], msg, stamp)
        if problem is not None:
            report.errors.append(str(problem))

    def _feed_egomotion(self, session: SessionState, report: DriveReport) -> None:
        report.errors.extend(self.dropped)
        self.dropped.clear()
        with session.lock:
            times = list(session.ego_trajectory.timestamps_us[self.fed_poses :])
            poses = list(session.ego_trajectory.poses[self.fed_poses :])
            states = list(session.dynamic_states[self.fed_poses :])
            self.fed_poses += len(times)
        for t, pose, state in zip(times, poses, states, strict=True):
            if not (np.all(np.isfinite(pose.position)) and np.all(np.isfinite(pose.quat_xyzw))):
                report.errors.append(f"egomotion: the pose at {t} us is not finite")
                continue
            stamp = messages.stamp_ns(t)
            self._feed("odometry", messages.odometry(stamp, pose.position, pose.quat_xyzw, state), stamp, report)
            accel = messages.acceleration(stamp, state)
            if accel is not None and "acceleration" in self.rows:
                self._feed("acceleration", accel, stamp, report)

    def _feed_frame(self, session: SessionState, report: DriveReport) -> bool:
        """Feed the planning camera's newest frame when it is new; True when one was fed."""
        with session.lock:
            frame = session.latest_frame(self.camera)
            declared = session.cameras.get(self.camera)
        if not isinstance(frame, CameraFrame) or declared is None:
            if self.last_frame_us is None:
                report.errors.append(f"no frame from camera {self.camera!r} yet")
            return False
        if self.last_frame_us is not None and frame.timestamp_us <= self.last_frame_us:
            return False
        self.last_frame_us = frame.timestamp_us
        stamp = messages.stamp_ns(frame.timestamp_us)
        info, note = messages.camera_info(stamp, declared)
        if note:
            report.notes.append(note)
        self._feed("camera_info", info, stamp, report)
        self._feed("image", messages.compressed_image(stamp, self.camera, frame.image_bytes), stamp, report)
        return True

    def _feed_route(self, session: SessionState, now_us: int, report: DriveReport) -> None:
        """The route's command, held; nothing without a route, or with an empty one (the runtime then uses
        ``command.default`` once the last command is older than ``command.max_age_s``)."""
        with session.lock:
            route = np.array(session.route_waypoints_in_rig, dtype=np.float64)
            route_us = int(session.route_timestamp_us)
        if len(route) == 0:  # no route (or none any more): the command in force ages into command.default
            return
        self.last_route_us = route_us
        try:
            wanted = route_command(route[:, :2] if route.ndim == 2 else route, self.rule)
        except RouteError as exc:
            report.errors.append(f"route: {exc}")
            return
        stamp = messages.stamp_ns(now_us)
        held = self.hold.update_command(wanted, stamp)
        self._feed("command", messages.command(held.value), stamp, report)

    # ---- the drive

    def drive(self, ctx: DriveContext, gate: ModelGate) -> DriveResult:
        """Feed, plan when due, answer (see the module docstring)."""
        with self.lock:
            return self._drive(ctx, gate)

    def _drive(self, ctx: DriveContext, gate: ModelGate) -> DriveResult:
        session, now_us = ctx.session, ctx.time_now_us
        report = DriveReport()
        self.now_ns = messages.stamp_ns(now_us)
        self._feed_egomotion(session, report)
        self._feed_route(session, now_us, report)
        new_frame = self._feed_frame(session, report)
        planned = False
        due = self.last_plan_frame_us is None or (
            self.last_frame_us is not None and self.last_frame_us - self.last_plan_frame_us >= self.plan_interval_us
        )
        if new_frame and due:
            if gate.acquire(self.wait):
                try:
                    planned = self._plan(session, report)
                finally:
                    gate.release()
            else:
                report.notes.append("the model is busy with another session: the plan in force answers")
        report.scalars["planned"] = 1.0 if planned else 0.0
        return self._answer(ctx, report, planned)

    def _plan(self, session: SessionState, report: DriveReport) -> bool:
        """One model call on the newest frame; True when it was made (valid or not). A frame the runtime could not
        plan on (an input missing or refused) does not count for ``plan_interval_s``: the next frame is tried."""
        try:
            cycle = self.runtime.plan(self.now_ns)
        except Exception as exc:  # the engine failed: reported, the plan in force answers
            self.last_plan_frame_us = self.last_frame_us
            report.errors.append(f"planning failed: {type(exc).__name__}: {exc}")
            return False
        report.errors.extend(str(p) for p in cycle.problems)
        result = cycle.result
        if result is None:
            return False
        self.last_plan_frame_us = self.last_frame_us
        report.scalars["valid"] = 1.0 if result.valid else 0.0
        report.scalars["confidence"] = float(result.confidence)
        report.scalars["latency_ms"] = float(result.timing.total_ms)
        if not result.valid:
            report.scalars[f"rejected: {result.reason}"] = 1.0
            return True
        stamp_us = messages.time_us(result.stamp_ns)
        with session.lock:
            at_stamp = session.ego_trajectory.interpolate(stamp_us) or session.latest_pose()
        if at_stamp is None:
            report.errors.append("no ego pose at the frame's time: the plan cannot be placed")
            return True
        self.plan = LocalPlan.from_waypoints(result.waypoints, stamp_us, at_stamp)
        self.stop = None
        self.candidates = tuple(
            LocalPlan.from_waypoints(c.waypoints, stamp_us, at_stamp)
            for c in result.candidates
            if c.valid and c.waypoints
        )
        self.plan_stamp_us = stamp_us
        return True

    def _answer(self, ctx: DriveContext, report: DriveReport, planned: bool) -> DriveResult:
        session, now_us = ctx.session, ctx.time_now_us
        with session.lock:
            anchor = session.latest_pose()
            speed = session.speed_mps()
        anchor = anchor if anchor is not None and _finite(anchor) else Pose.identity()
        trajectory: Trajectory | None = None
        sampled: list[Trajectory] = []
        if self.plan is not None:
            trajectory = self.plan.retimed(now_us, anchor, max(ctx.time_query_us, now_us))
        if trajectory is not None:
            fresh = planned and self.plan_stamp_us == self.last_frame_us and report.scalars.get("valid") == 1.0
            report.scalars["source"] = SOURCE_NEW_PLAN if fresh else SOURCE_PLAN_IN_FORCE
            report.scalars["plan_age_s"] = (now_us - self.plan_stamp_us) / 1e6
            sampled = [t for t in (c.retimed(now_us, anchor) for c in self.candidates) if t is not None]
        else:
            trajectory = self._stop(now_us, max(ctx.time_query_us, now_us), anchor, speed)
            report.scalars["source"] = SOURCE_STOP
        command = self.hold.command if self.last_route_us is not None else None
        command = command or self.default_command
        indicator = TURN_INDICATORS.get(command, TurnIndicator.NO_COMMAND) if command else TurnIndicator.NO_COMMAND
        if command is not None:
            report.scalars["command"] = float(command.index)
        return DriveResult(
            trajectory_in_rig=trajectory,
            debug_scalars=report.debug_scalars(),
            sampled_trajectories_in_rig=sampled,
            turn_indicator=indicator,
        )

    def _stop(self, now_us: int, query_us: int, anchor: Pose, speed: float) -> Trajectory:
        """The stop in force, re-timed, while it lasts (the car brakes at one rate, whatever the speed it reports
        on the way); else a new one from the current speed along the rest of the last plan's path."""
        held = self.stop.retimed(now_us, anchor, query_us) if self.stop is not None else None
        if held is not None:
            return held
        path = self.plan.path_ahead(now_us, anchor) if self.plan is not None else None
        stop = comfortable_stop(now_us, speed, path)
        self.stop = LocalPlan.from_trajectory(stop, anchor)
        return stop


def _finite(pose: Pose) -> bool:
    return bool(np.all(np.isfinite(pose.position)) and np.all(np.isfinite(pose.quat_xyzw)))
