"""A plan's waypoints → the timed points a trajectory follower takes (Autoware's ``TrajectoryPoint`` contents).

ROS-free: ``ros/autoware.py`` turns the points into messages. Given the ego pose at the image stamp (the
odometry's frame), the measured longitudinal speed and the plan's waypoints in the same frame
(``frames.transform_waypoints``), the points are:

* point 0: the ego pose at the image stamp (its measured yaw), ``t`` 0, the measured speed; points 1..n: the
  waypoints at their times (0.5 s steps), positions exactly as ``~/output/path_fixed`` has them, yaw the path's
  tangent: the direction of the central difference ``p[i+1] − p[i−1]`` inside, of the one-sided second-order
  difference (the parabola through the last three points) at the last one (``path_fixed``'s yaw, the direction
  from the previous point, lags half a segment behind in curves);
* speed: point 0 measured; the others by central differences over the timed points, ``|p[i+1] − p[i−1]| /
  (t[i+1] − t[i−1])``, the last one backward ``|p[n] − p[n−1]| / (t[n] − t[n−1])``;
* acceleration and heading rate: the same differences of the speeds and of the (unwrapped) yaws over time:
  forward at point 0, central inside, backward at the last point;
* front wheel angle: a kinematic bicycle model, ``atan(wheelbase · κ)``, with the path curvature ``κ`` as the
  central difference of yaw over arc length (one-sided at the ends); rear wheel angle and lateral speed 0.

Refused (:class:`TrajectoryError`, nothing published): fewer than 2 waypoints (a follower needs at least 3
points), a non-finite input, times that do not increase, or two consecutive points closer than
:data:`MIN_STEP_M` (duplicates: no direction, no curvature).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .frames import EgoPose
from .parsing import Waypoint

#: Consecutive points closer than this have no direction (the parser keeps the previous yaw below 1 mm).
MIN_STEP_M = 1e-3
#: Autoware's sample vehicle's wheelbase (m), the default of ``vehicle.wheelbase_m``.
DEFAULT_WHEELBASE_M = 2.79
#: A trajectory follower needs at least this many points (Autoware's MPC and PID check it).
MIN_POINTS = 3


class TrajectoryError(ValueError):
    """The waypoints cannot make a finite, timed trajectory; the message says why."""


@dataclass(frozen=True)
class TimedPoint:
    """One trajectory point in the ego pose's frame: ``t`` s after the image stamp, position (m), yaw (rad),
    speed (m/s), acceleration (m/s²), heading rate (rad/s), front wheel angle (rad)."""

    t: float
    x: float
    y: float
    z: float
    yaw: float
    speed: float
    acceleration: float
    heading_rate: float
    front_wheel_angle: float


def _derivative(values: Sequence[float], along: Sequence[float]) -> list[float]:
    """d values / d along: forward at the first point, central inside, backward at the last."""
    last = len(values) - 1
    result = []
    for i in range(len(values)):
        lo, hi = max(i - 1, 0), min(i + 1, last)
        result.append((values[hi] - values[lo]) / (along[hi] - along[lo]))
    return result


def _unwrapped(yaws: Sequence[float]) -> list[float]:
    out = [yaws[0]]
    for yaw in yaws[1:]:
        out.append(out[-1] + math.atan2(math.sin(yaw - out[-1]), math.cos(yaw - out[-1])))
    return out


def _tangent(times: Sequence[float], xs: Sequence[float], ys: Sequence[float], i: int) -> float:
    """The path's direction at point ``i`` (``i >= 1``): central difference inside; at the last point the one-sided
    second-order difference (the derivative at ``t[n]`` of the parabola through the last three points), which a
    circle's tangent keeps as the central one does (the direction from the previous point lags half a segment)."""
    last = len(xs) - 1
    if i < last:
        return math.atan2(ys[i + 1] - ys[i - 1], xs[i + 1] - xs[i - 1])
    t0, t1, t2 = times[i - 2], times[i - 1], times[i]
    w0 = (t2 - t1) / ((t0 - t1) * (t0 - t2))
    w1 = (t2 - t0) / ((t1 - t0) * (t1 - t2))
    w2 = (2 * t2 - t0 - t1) / ((t2 - t0) * (t2 - t1))
    dx = w0 * xs[i - 2] + w1 * xs[i - 1] + w2 * xs[i]
    dy = w0 * ys[i - 2] + w1 * ys[i - 1] + w2 * ys[i]
    if math.hypot(dx, dy) * (t2 - t1) < MIN_STEP_M:  # the parabola stops there (a reversal): the last segment's
        return math.atan2(ys[i] - ys[i - 1], xs[i] - xs[i - 1])
    return math.atan2(dy, dx)


def trajectory_points(
    waypoints: Sequence[Waypoint], pose: EgoPose, speed: float, wheelbase_m: float
) -> tuple[TimedPoint, ...]:
    """The ego point and ``waypoints`` (in ``pose.frame_id``) as timed points (see the module docstring);
    raises :class:`TrajectoryError`."""
    if len(waypoints) + 1 < MIN_POINTS:
        raise TrajectoryError(f"{len(waypoints)} waypoint(s): a trajectory needs at least {MIN_POINTS} points")
    numbers = [pose.x, pose.y, pose.z, pose.yaw, speed, wheelbase_m]
    numbers += [v for w in waypoints for v in (w.t, w.x, w.y, w.yaw)]
    if not all(math.isfinite(v) for v in numbers):
        raise TrajectoryError("a waypoint, the ego pose or the speed is not finite")
    times = [0.0] + [w.t for w in waypoints]
    xs, ys = [pose.x] + [w.x for w in waypoints], [pose.y] + [w.y for w in waypoints]
    arc = [0.0]
    for i in range(1, len(times)):
        if times[i] <= times[i - 1]:
            raise TrajectoryError(f"waypoint times do not increase ({times[i - 1]:g} s then {times[i]:g} s)")
        step = math.hypot(xs[i] - xs[i - 1], ys[i] - ys[i - 1])
        if step < MIN_STEP_M:
            what = "the ego position" if i == 1 else f"waypoint {i - 1}"
            raise TrajectoryError(f"waypoint {i} duplicates {what} (step {step:.4f} m): no heading to follow")
        arc.append(arc[-1] + step)
    last = len(times) - 1
    headings = [pose.yaw] + [_tangent(times, xs, ys, i) for i in range(1, last + 1)]
    yaws = _unwrapped(headings)
    speeds = [speed]
    for i in range(1, len(times)):
        lo, hi = i - 1, min(i + 1, last)
        speeds.append(math.hypot(xs[hi] - xs[lo], ys[hi] - ys[lo]) / (times[hi] - times[lo]))
    accelerations = _derivative(speeds, times)
    heading_rates = _derivative(yaws, times)
    curvatures = _derivative(yaws, arc)
    points = tuple(
        TimedPoint(
            t=times[i],
            x=xs[i],
            y=ys[i],
            z=pose.z,
            yaw=headings[i],
            speed=speeds[i],
            acceleration=accelerations[i],
            heading_rate=heading_rates[i],
            front_wheel_angle=math.atan(wheelbase_m * curvatures[i]),
        )
        for i in range(len(times))
    )
    values = [v for p in points for v in (p.speed, p.acceleration, p.heading_rate, p.front_wheel_angle)]
    if not all(math.isfinite(v) for v in values):
        raise TrajectoryError("the waypoints give a non-finite speed, acceleration or heading rate")
    return points
