"""Tracking the plans: pure pursuit on the plan's path and a PI controller on its speed profile
(:class:`Tracker`), with the plan hand-over rules of a closed-loop episode.

Pure pursuit after R. C. Coulter, "Implementation of the Pure Pursuit Path Tracking Algorithm",
CMU-RI-TR-92-01, 1992: steer the rear axle onto the circle through the point of the path one look-ahead
distance ``Ld`` away, ``delta = atan(2 L sin(alpha) / Ld)`` (``alpha``: the point's bearing from the heading,
``L``: the wheelbase), ``Ld`` growing with speed. Speed: the plan's own speed profile (the waypoints' spacing
over their 0.5 s) previewed by ``SPEED_PREVIEW_S``, feed-forward of its slope plus proportional-integral
feedback on the speed error.

A plan holds from the time it takes effect until its last waypoint's time; a newer valid plan replaces it when
it takes effect. When none holds any more (the last valid one ran out), the car brakes to a stop at
:data:`FALLBACK_DECEL` along the last plan's path (extended straight) — never beyond a comfortable
deceleration, never a swerve.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from wam_diff2_ros.core.kinematics import COMFORTABLE_DECEL_MPS2
from wam_diff2_ros.drive.vehicle import VehicleLimits, VehicleState

LOOKAHEAD_MIN_M = 4.0
LOOKAHEAD_GAIN_S = 0.8  # Ld = max(LOOKAHEAD_MIN_M, LOOKAHEAD_GAIN_S * v)
SPEED_PREVIEW_S = 0.3
KP = 1.0  # 1/s
KI = 0.2  # 1/s²
INTEGRAL_LIMIT = 2.0  # m/s
FALLBACK_DECEL = -COMFORTABLE_DECEL_MPS2  # m/s²


@dataclass(frozen=True)
class PlanTrack:
    """A plan in the world frame: ``t`` (s, episode time) with ``x, y`` (m), starting at the pose it was made
    from; it holds from ``effective_s`` until ``t[-1]``. ``source``: where it came from ("model")."""

    t: np.ndarray
    x: np.ndarray
    y: np.ndarray
    effective_s: float
    source: str = "model"
    index: int = -1  # the plan record it came from

    @property
    def end_s(self) -> float:
        return float(self.t[-1])

    def speed_at(self, t: float) -> tuple[float, float]:
        """Planned speed (m/s) and its slope (m/s²) at time ``t`` (clamped to the plan's span)."""
        step = np.hypot(np.diff(self.x), np.diff(self.y)) / np.diff(self.t)
        mids = (self.t[1:] + self.t[:-1]) / 2
        v = float(np.interp(t, mids, step))
        if len(mids) < 2:
            return v, 0.0
        slope = np.diff(step) / np.diff(mids)
        k = int(np.clip(np.searchsorted(mids, t) - 1, 0, len(slope) - 1))
        return v, float(slope[k])


def plan_from_waypoints(
    pose: tuple[float, float, float],
    stamp_s: float,
    waypoints: list[tuple[float, float, float]],
    effective_s: float,
    index: int,
) -> PlanTrack:
    """A :class:`PlanTrack` from waypoints ``(t after the stamp, x, y)`` in base_link at the image stamp, moved into
    the world by the ego ``pose`` (x, y, yaw) at that stamp."""
    x0, y0, yaw0 = pose
    c, s = math.cos(yaw0), math.sin(yaw0)
    t = [stamp_s] + [stamp_s + w[0] for w in waypoints]
    xs = [x0] + [x0 + c * w[1] - s * w[2] for w in waypoints]
    ys = [y0] + [y0 + s * w[1] + c * w[2] for w in waypoints]
    return PlanTrack(np.array(t), np.array(xs), np.array(ys), effective_s, "model", index)


class Tracker:
    """Pure pursuit + PI speed control on the plan in force (see the module docstring)."""

    def __init__(self, limits: VehicleLimits | None = None) -> None:
        self.limits = limits or VehicleLimits()
        self.plan: PlanTrack | None = None
        self.pending: list[PlanTrack] = []
        self.integral = 0.0
        self.braking = False

    def submit(self, plan: PlanTrack) -> None:
        """A valid plan that takes effect at ``plan.effective_s``."""
        self.pending.append(plan)
        self.pending.sort(key=lambda p: p.effective_s)

    def plan_at(self, t: float) -> PlanTrack | None:
        """The plan in force at ``t`` (the newest one that took effect), or None when the last ran out."""
        while self.pending and self.pending[0].effective_s <= t:
            self.plan = self.pending.pop(0)
            self.integral = 0.0
        return self.plan

    def command(self, t: float, state: VehicleState) -> tuple[float, float, bool]:
        """``(steering angle, acceleration, following a plan)`` at time ``t``."""
        plan = self.plan_at(t)
        if plan is None:
            return state.delta, FALLBACK_DECEL if state.v > 0 else 0.0, False
        live = t <= plan.end_s
        steer = self._steer(plan, state)
        if not live:
            return steer, FALLBACK_DECEL if state.v > 0 else 0.0, False
        v_ref, slope = plan.speed_at(t + SPEED_PREVIEW_S)
        error = v_ref - state.v
        self.integral = float(np.clip(self.integral + error * 0.02, -INTEGRAL_LIMIT, INTEGRAL_LIMIT))
        accel = slope + KP * error + KI * self.integral
        if v_ref < 0.3 and state.v < 0.5:  # the plan stops: hold the car
            accel = min(accel, FALLBACK_DECEL)
        return steer, accel, True

    def _steer(self, plan: PlanTrack, state: VehicleState) -> float:
        lookahead = max(LOOKAHEAD_MIN_M, LOOKAHEAD_GAIN_S * state.v)
        gx, gy = pursuit_point(plan.x, plan.y, state.x, state.y, lookahead)
        alpha = math.atan2(gy - state.y, gx - state.x) - state.yaw
        alpha = math.atan2(math.sin(alpha), math.cos(alpha))
        distance = max(math.hypot(gx - state.x, gy - state.y), 1e-3)
        return math.atan2(2.0 * self.limits.wheelbase * math.sin(alpha), distance)


def pursuit_point(xs: np.ndarray, ys: np.ndarray, x: float, y: float, lookahead: float) -> tuple[float, float]:
    """The point of the polyline ``(xs, ys)`` (extended straight past its end) that is ``lookahead`` from ``(x, y)``,
    searched forward from the polyline point nearest to ``(x, y)``."""
    if len(xs) < 2:
        return float(xs[0]), float(ys[0])
    seg_x, seg_y = np.diff(xs), np.diff(ys)
    lengths = np.hypot(seg_x, seg_y)
    keep = lengths > 1e-6
    if not keep.any():
        return float(xs[-1]), float(ys[-1])
    px, py = np.append(xs[:-1][keep], xs[-1]), np.append(ys[:-1][keep], ys[-1])
    # nearest point on the polyline
    dx, dy = np.diff(px), np.diff(py)
    seg2 = dx * dx + dy * dy
    u = np.clip(((x - px[:-1]) * dx + (y - py[:-1]) * dy) / seg2, 0.0, 1.0)
    near = np.hypot(px[:-1] + u * dx - x, py[:-1] + u * dy - y)
    k = int(np.argmin(near))
    start = (px[k] + u[k] * dx[k], py[k] + u[k] * dy[k])
    # walk forward for the first point at distance >= lookahead
    points = [start, *zip(px[k + 1 :], py[k + 1 :], strict=True)]
    for (ax, ay), (bx, by) in itertools.pairwise(points):
        if math.hypot(bx - x, by - y) >= lookahead:
            return _circle_cross(ax, ay, bx, by, x, y, lookahead)
    ax, ay = px[-2], py[-2]
    bx, by = px[-1], py[-1]
    norm = max(math.hypot(bx - ax, by - ay), 1e-6)
    ex, ey = bx + (bx - ax) / norm * 2 * lookahead, by + (by - ay) / norm * 2 * lookahead
    return _circle_cross(bx, by, ex, ey, x, y, lookahead)


def _circle_cross(ax: float, ay: float, bx: float, by: float, x: float, y: float, r: float) -> tuple[float, float]:
    """Where segment a→b leaves the circle of radius ``r`` about ``(x, y)`` (b itself when it does not)."""
    dx, dy = bx - ax, by - ay
    fx, fy = ax - x, ay - y
    a = dx * dx + dy * dy
    b = 2 * (fx * dx + fy * dy)
    c = fx * fx + fy * fy - r * r
    disc = b * b - 4 * a * c
    if a < 1e-12 or disc < 0:
        return bx, by
    u = (-b + math.sqrt(disc)) / (2 * a)
    u = min(max(u, 0.0), 1.0)
    return ax + u * dx, ay + u * dy
