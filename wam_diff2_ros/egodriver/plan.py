"""The plan in force and what a drive answers with it: the plan re-timed to now, or a comfortable stop.

A valid plan is kept in the session's ``local`` frame with absolute times (:class:`LocalPlan`): waypoint ``i`` of a
plan made from the frame at ``t`` is due at ``t + (i + 1)·dt``. Each drive expresses it in the rig frame at the
latest ego pose, led by the current pose at ``time_now_us`` and followed by the waypoints still ahead in time
(:meth:`LocalPlan.retimed`). When none is ahead any more (the plan ran out), the answer is a comfortable stop
(:func:`comfortable_stop`): from the current speed at the closed loop's comfortable deceleration
(:data:`~wam_diff2_ros.core.kinematics.COMFORTABLE_DECEL_MPS2`) along the rest of the last plan's path, extended
straight (straight ahead without one) — never a swerve, never harder braking. The stop is then held like a plan,
re-timed, until it runs out or a valid plan replaces it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from carla_driver_interface.geometry import Pose, Trajectory

from wam_diff2_ros.core.kinematics import COMFORTABLE_DECEL_MPS2
from wam_diff2_ros.core.parsing import Waypoint

STOP_STEP_S = 0.1  # spacing of a stop's poses
STOP_HORIZON_S = 4.0  # a stop's poses span at least this long (then the car stands)


@dataclass(frozen=True)
class LocalPlan:
    """A plan in the session's ``local`` frame: absolute times (µs, increasing) and poses."""

    times_us: tuple[int, ...]
    poses: tuple[Pose, ...]

    @classmethod
    def from_waypoints(cls, waypoints: Sequence[Waypoint], stamp_us: int, pose_at_stamp: Pose) -> LocalPlan:
        """Waypoints ``(t after the stamp, x, y, yaw)`` in the rig frame at ``stamp_us``, moved into ``local`` by the
        ego pose at that stamp."""
        times, poses = [], []
        for waypoint in waypoints:
            times.append(stamp_us + round(waypoint.t * 1e6))
            poses.append(pose_at_stamp @ Pose.from_xyz_yaw(waypoint.x, waypoint.y, 0.0, waypoint.yaw))
        return cls(tuple(times), tuple(poses))

    @classmethod
    def from_trajectory(cls, trajectory_in_rig: Trajectory, anchor: Pose) -> LocalPlan:
        """A rig-frame trajectory at ``anchor`` (the ego pose it was made at) moved into ``local``."""
        return cls(tuple(trajectory_in_rig.timestamps_us), tuple(anchor @ p for p in trajectory_in_rig.poses))

    @property
    def end_us(self) -> int:
        """When the last waypoint is due."""
        return self.times_us[-1] if self.times_us else 0

    def retimed(self, now_us: int, anchor: Pose, query_us: int | None = None) -> Trajectory | None:
        """The plan in the rig frame at ``anchor`` (the latest ego pose): the current pose at ``now_us``, then the
        waypoints due after it; None when the plan has run out: no waypoint is due after ``now_us``, or (with
        ``query_us``, the instant the runtime steps to next) the last one is due before ``query_us``."""
        ahead = [(t, p) for t, p in zip(self.times_us, self.poses, strict=True) if t > now_us]
        if not ahead or (query_us is not None and ahead[-1][0] < query_us):
            return None
        inverse = anchor.inverse()
        trajectory = Trajectory([now_us], [Pose.identity()])
        for t, pose in ahead:
            trajectory.append(t, inverse @ pose)
        return trajectory

    def path_ahead(self, now_us: int, anchor: Pose) -> np.ndarray:
        """The positions (N, 2) in the rig frame at ``anchor`` of the waypoints due after ``now_us``."""
        inverse = anchor.inverse()
        points = [(inverse @ p).position[:2] for t, p in zip(self.times_us, self.poses, strict=True) if t > now_us]
        return np.array(points, dtype=np.float64).reshape(-1, 2)


def comfortable_stop(
    now_us: int, speed_mps: float, path_ahead: np.ndarray | None = None, decel_mps2: float = COMFORTABLE_DECEL_MPS2
) -> Trajectory:
    """A stop in the rig frame from ``speed_mps`` at ``decel_mps2`` along ``path_ahead`` (rig positions (N, 2), from
    the ego outwards; extended straight past its end; straight ahead when empty), led by the current pose at
    ``now_us``; poses every :data:`STOP_STEP_S` until the car stands, for at least :data:`STOP_HORIZON_S`."""
    speed = speed_mps if math.isfinite(speed_mps) else 0.0
    speed = max(0.0, speed)
    stop_s = speed / decel_mps2
    steps = max(1, math.ceil(max(stop_s, STOP_HORIZON_S) / STOP_STEP_S))
    times_s = np.arange(1, steps + 1) * STOP_STEP_S
    moving = np.minimum(times_s, stop_s)
    distances = speed * moving - 0.5 * decel_mps2 * moving**2
    polyline = _stop_path(path_ahead, float(distances[-1]))
    xy, yaw = _along(polyline, distances)
    trajectory = Trajectory([now_us], [Pose.identity()])
    for k, t in enumerate(times_s):
        trajectory.append(now_us + round(t * 1e6), Pose.from_xyz_yaw(xy[k, 0], xy[k, 1], 0.0, yaw[k]))
    return trajectory


def _stop_path(path_ahead: np.ndarray | None, length_m: float) -> np.ndarray:
    """The ego's position followed by ``path_ahead`` (points closer than 1 cm to the previous dropped), extended
    straight by ``length_m`` + 1 m past its end, so any distance up to ``length_m`` lies on it."""
    points = [np.zeros(2)]
    for point in path_ahead if path_ahead is not None else ():
        if np.all(np.isfinite(point)) and np.hypot(*(point - points[-1])) > 0.01:
            points.append(np.asarray(point, dtype=np.float64))
    direction = points[-1] - points[-2] if len(points) > 1 else np.array([1.0, 0.0])
    direction = direction / max(float(np.hypot(*direction)), 1e-9)
    points.append(points[-1] + direction * (length_m + 1.0))
    return np.array(points)


def _along(polyline: np.ndarray, distances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (N, 2) and headings (N,) at arc lengths ``distances`` along ``polyline``."""
    segments = np.diff(polyline, axis=0)
    lengths = np.hypot(segments[:, 0], segments[:, 1])
    arc = np.concatenate([[0.0], np.cumsum(lengths)])
    x = np.interp(distances, arc, polyline[:, 0])
    y = np.interp(distances, arc, polyline[:, 1])
    index = np.clip(np.searchsorted(arc, distances, side="right") - 1, 0, len(segments) - 1)
    yaw = np.arctan2(segments[index, 1], segments[index, 0])
    return np.stack([x, y], axis=1), yaw
