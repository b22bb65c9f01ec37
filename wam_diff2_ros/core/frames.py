"""The ego pose in a fixed frame, and plans moved from base_link into it (ROS-free, planar).

A plan is answered in base_link at the image stamp. To publish it in the odometry's fixed frame (the
``header.frame_id`` of ``nav_msgs/Odometry``: ``odom``, ``map``), each waypoint is transformed by the ego
pose at the image stamp, interpolated between the two odometry samples around it (position linearly,
yaw along the shorter arc) or, when the stamp lies beyond the newest / before the oldest sample,
extrapolated from the nearest one with its twist (at most ``max_gap_ns``). The transform is planar
(x, y, yaw; the plan's z is the ego's z): roll and pitch are ignored, as the model plans on the ground
plane.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from .parsing import Waypoint
from .units import NS_PER_S

_MIN_QUATERNION_NORM = 0.5  # |q| far from 1 (an all-zero quaternion): no orientation


@dataclass(frozen=True)
class EgoPose:
    """The base_link pose in ``frame_id``: position (m) and yaw about z (rad)."""

    frame_id: str
    x: float
    y: float
    z: float
    yaw: float

    def transform(self, x: float, y: float, yaw: float = 0.0) -> tuple[float, float, float]:
        """A base_link point (and heading) expressed in ``frame_id``."""
        cos_yaw, sin_yaw = math.cos(self.yaw), math.sin(self.yaw)
        return (
            self.x + cos_yaw * x - sin_yaw * y,
            self.y + sin_yaw * x + cos_yaw * y,
            _wrap(self.yaw + yaw),
        )


def _wrap(angle: float) -> float:
    return math.atan2(math.sin(angle), math.cos(angle))


def yaw_from_quaternion(x: float, y: float, z: float, w: float) -> float | None:
    """The yaw (rotation about z, ZYX convention) of a quaternion; None when it is not a rotation."""
    values = (x, y, z, w)
    if not all(math.isfinite(v) for v in values):
        return None
    norm = math.sqrt(sum(v * v for v in values))
    if norm < _MIN_QUATERNION_NORM:
        return None
    x, y, z, w = (v / norm for v in values)
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def ego_pose(frame_id: str, x: float, y: float, z: float, qx: float, qy: float, qz: float, qw: float) -> EgoPose | None:
    """An :class:`EgoPose` from a pose message's fields; None without a frame, with a non-finite position or
    an orientation that is not a rotation."""
    yaw = yaw_from_quaternion(qx, qy, qz, qw)
    if not frame_id or yaw is None or not all(math.isfinite(v) for v in (x, y, z)):
        return None
    return EgoPose(frame_id, float(x), float(y), float(z), yaw)


class PosedSample(Protocol):
    """What :func:`pose_at` reads from an odometry sample."""

    stamp_ns: int
    vx: float
    vy: float
    yaw_rate: float
    pose: EgoPose | None


def pose_at(samples: Sequence[PosedSample], stamp_ns: int, max_gap_ns: int) -> tuple[EgoPose | None, str]:
    """The ego pose at ``stamp_ns`` from odometry ``samples`` sorted by stamp (see the module docstring), or
    None and why not."""
    posed = [s for s in samples if s.pose is not None]
    if not posed:
        return None, "odometry has no pose (empty header.frame_id or an invalid orientation)"
    frame = posed[-1].pose.frame_id  # type: ignore[union-attr]
    posed = [s for s in posed if s.pose.frame_id == frame]  # type: ignore[union-attr]
    before = [s for s in posed if s.stamp_ns <= stamp_ns]
    after = [s for s in posed if s.stamp_ns >= stamp_ns]
    if before and after:
        a, b = before[-1], after[0]
        pa, pb = a.pose, b.pose
        assert pa is not None and pb is not None
        if b.stamp_ns == a.stamp_ns:
            return pa, ""
        share = (stamp_ns - a.stamp_ns) / (b.stamp_ns - a.stamp_ns)
        return (
            EgoPose(
                frame,
                pa.x + share * (pb.x - pa.x),
                pa.y + share * (pb.y - pa.y),
                pa.z + share * (pb.z - pa.z),
                _wrap(pa.yaw + share * _wrap(pb.yaw - pa.yaw)),
            ),
            "",
        )
    nearest = before[-1] if before else after[0]
    gap_ns = stamp_ns - nearest.stamp_ns
    if abs(gap_ns) > max_gap_ns:
        return None, (
            f"nearest odometry pose is {gap_ns / 1e6:+.0f} ms from the image (limit ±{max_gap_ns / 1e6:g} ms)"
        )
    pose = nearest.pose
    assert pose is not None
    seconds = gap_ns / NS_PER_S
    # Constant body velocity and yaw rate over the (short) gap.
    dx, dy, _ = EgoPose(frame, 0.0, 0.0, 0.0, pose.yaw).transform(nearest.vx * seconds, nearest.vy * seconds)
    return replace(pose, x=pose.x + dx, y=pose.y + dy, yaw=_wrap(pose.yaw + nearest.yaw_rate * seconds)), ""


def transform_waypoints(waypoints: Sequence[Waypoint], pose: EgoPose) -> tuple[Waypoint, ...]:
    """``waypoints`` (base_link at the image stamp) in ``pose.frame_id``; times unchanged."""
    moved = []
    for waypoint in waypoints:
        x, y, yaw = pose.transform(waypoint.x, waypoint.y, waypoint.yaw)
        moved.append(Waypoint(t=waypoint.t, x=x, y=y, yaw=yaw))
    return tuple(moved)
