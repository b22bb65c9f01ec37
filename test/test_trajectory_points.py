"""Waypoints → timed trajectory points (``core/trajectory_points.py``) and the turn-signal hold
(``core/turn_signal.py``): no ROS."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wam_diff2_ros.core.frames import EgoPose, transform_waypoints
from wam_diff2_ros.core.parsing import Waypoint
from wam_diff2_ros.core.prompts import NavigationCommand
from wam_diff2_ros.core.trajectory_points import TrajectoryError, trajectory_points
from wam_diff2_ros.core.turn_signal import TurnSignalHold, signal_command

pytestmark = pytest.mark.core

LEFT, STRAIGHT, RIGHT = NavigationCommand.LEFT, NavigationCommand.STRAIGHT, NavigationCommand.RIGHT
S = 1_000_000_000


def base_waypoints(xy: list[tuple[float, float]], dt: float = 0.5) -> tuple[Waypoint, ...]:
    """Waypoints as the parser makes them: yaw from the previous point (the ego origin first)."""
    out, previous = [], (0.0, 0.0)
    for i, (x, y) in enumerate(xy):
        out.append(Waypoint(t=dt * (i + 1), x=x, y=y, yaw=math.atan2(y - previous[1], x - previous[0])))
        previous = (x, y)
    return tuple(out)


def test_straight_at_constant_speed() -> None:
    pose = EgoPose("map", 100.0, -20.0, 1.5, math.pi / 2)
    waypoints = transform_waypoints(base_waypoints([(2.0 * (i + 1), 0.0) for i in range(8)]), pose)
    points = trajectory_points(waypoints, pose, speed=4.0, wheelbase_m=2.79)
    assert len(points) == 9 and [p.t for p in points] == [0.5 * i for i in range(9)]
    assert (points[0].x, points[0].y, points[0].z, points[0].yaw, points[0].speed) == (100.0, -20.0, 1.5, pose.yaw, 4.0)
    for point, waypoint in zip(points[1:], waypoints, strict=True):
        assert (point.x, point.y) == (waypoint.x, waypoint.y)  # path_fixed's positions
        assert point.yaw == pytest.approx(waypoint.yaw)  # a straight line's tangent is its direction
        assert point.speed == pytest.approx(4.0) and point.z == 1.5
        assert point.heading_rate == pytest.approx(0.0, abs=1e-12) and point.front_wheel_angle == pytest.approx(0.0)
    assert [p.acceleration for p in points[1:]] == pytest.approx([0.0] * 8, abs=1e-9)


def test_accelerating_plan_gives_central_differences() -> None:
    # x = t² (a = 2 m/s²): central differences of positions give the speed at t exactly for a parabola
    xy = [((0.5 * (i + 1)) ** 2, 0.0) for i in range(8)]
    points = trajectory_points(base_waypoints(xy), EgoPose("map", 0.0, 0.0, 0.0, 0.0), 0.0, 2.79)
    assert [p.speed for p in points[1:-1]] == pytest.approx([2 * p.t for p in points[1:-1]])
    assert [p.acceleration for p in points[2:-2]] == pytest.approx([2.0] * 5)
    assert points[0].speed == 0.0 and points[0].acceleration == pytest.approx(points[1].speed / 0.5)


def test_a_circle_gives_its_heading_rate_and_bicycle_wheel_angle() -> None:
    radius, speed, wheelbase = 20.0, 5.0, 2.79
    omega = speed / radius
    xy = [(radius * math.sin(omega * t), radius * (1 - math.cos(omega * t))) for t in (0.5 * (i + 1) for i in range(8))]
    points = trajectory_points(base_waypoints(xy), EgoPose("map", 0.0, 0.0, 0.0, 0.0), speed, wheelbase)
    for point in points[2:-1]:
        assert point.heading_rate == pytest.approx(omega, rel=0.02)
        assert point.front_wheel_angle == pytest.approx(math.atan(wheelbase / radius), rel=0.02)
        assert point.speed == pytest.approx(speed, rel=0.01)


def test_yaw_is_the_tangent_of_a_circle() -> None:
    """Central differences inside, one-sided (second order) at the last point: close to the analytic tangent, and
    closer than the direction from the previous point (the waypoints' own yaw, half a segment behind in a curve)."""
    radius, speed = 15.0, 6.0
    omega = speed / radius
    times = [0.5 * (i + 1) for i in range(8)]
    xy = [(radius * math.sin(omega * t), radius * (1 - math.cos(omega * t))) for t in times]
    waypoints = base_waypoints(xy)
    points = trajectory_points(waypoints, EgoPose("map", 0.0, 0.0, 0.0, 0.0), speed, 2.79)
    assert points[0].yaw == 0.0  # the ego pose's own
    tangent_errors = [abs(p.yaw - omega * p.t) for p in points[1:-1]]
    previous_errors = [abs(w.yaw - omega * w.t) for w in waypoints[:-1]]
    assert max(tangent_errors) < 0.01  # rad: chord direction = tangent at the middle point with even steps
    assert min(previous_errors) > 0.09  # half a segment's turn: omega * 0.5 s / 2 = 0.1 rad
    assert abs(points[-1].yaw - omega * points[-1].t) < 0.01  # one-sided, second order, at the end


def test_yaw_across_pi_does_not_jump() -> None:
    pose = EgoPose("map", 0.0, 0.0, 0.0, math.pi - 0.01)
    xy = [(2.0 * (i + 1), 0.05 * (i + 1) ** 2) for i in range(8)]  # turning left across ±π in map
    points = trajectory_points(transform_waypoints(base_waypoints(xy), pose), pose, 4.0, 2.79)
    assert all(abs(p.heading_rate) < 1.0 for p in points)


@pytest.mark.parametrize(
    ("xy", "reason"),
    [
        ([(0.0, 0.0)] + [(float(i), 0.0) for i in range(1, 8)], "waypoint 1 duplicates the ego position"),
        ([(1.0, 0.0), (1.0, 0.0)] + [(float(i), 0.0) for i in range(2, 8)], "waypoint 2 duplicates waypoint 1"),
        ([(1.0, 0.0)], "1 waypoint(s)"),
        ([(1.0, 0.0), (float("nan"), 0.0)], "not finite"),
    ],
)
def test_waypoints_without_a_finite_trajectory_are_refused(xy, reason) -> None:
    with pytest.raises(TrajectoryError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        trajectory_points(base_waypoints(xy), EgoPose("map", 0.0, 0.0, 0.0, 0.0), 1.0, 2.79)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-60, 60, allow_nan=False), st.floats(-60, 60, allow_nan=False)), min_size=2, max_size=10
    ),
    st.floats(-math.pi, math.pi),
    st.floats(0, 30),
)
def test_every_accepted_trajectory_is_finite_and_timed(xy, yaw, speed) -> None:
    pose = EgoPose("map", 3.0, 4.0, 0.0, yaw)
    try:
        points = trajectory_points(transform_waypoints(base_waypoints(xy), pose), pose, speed, 2.79)
    except TrajectoryError:
        return
    assert len(points) >= 3
    assert all(b.t > a.t for a, b in itertools.pairwise(points))
    values = [v for p in points for v in (p.x, p.y, p.yaw, p.speed, p.acceleration, p.heading_rate)]
    assert all(math.isfinite(v) for v in values)
    assert all(abs(p.front_wheel_angle) < math.pi / 2 for p in points)


# --- the turn signal ------------------------------------------------------------------------------------------


def test_signal_values_map_to_commands_and_unknown_ones_are_refused() -> None:
    assert [signal_command(v) for v in (0, 1, 2, 3)] == [STRAIGHT, STRAIGHT, LEFT, RIGHT]
    with pytest.raises(ValueError, match="command 7 is not one of"):
        signal_command(7)


def test_a_turn_is_held_through_short_gaps_and_released_after_the_hold() -> None:
    hold = TurnSignalHold(hold_s=1.0)
    assert hold.update(2, 0) is LEFT
    assert hold.update(1, 1 * S // 10) is LEFT  # off 0 s
    assert hold.update(1, 9 * S // 10) is LEFT  # off 0.8 s: still held (a blink, a dropped message)
    assert hold.update(2, 1 * S) is LEFT  # back on: the gap is forgotten
    assert hold.update(1, 15 * S // 10) is LEFT
    assert hold.update(1, 24 * S // 10) is LEFT  # off 0.9 s
    assert hold.update(1, 25 * S // 10) is STRAIGHT  # off 1.0 s: released
    assert hold.update(3, 26 * S // 10) is RIGHT  # a new turn applies at once
    assert hold.update(2, 27 * S // 10) is LEFT  # and so does the other direction
    with pytest.raises(ValueError):
        hold.update(9, 28 * S // 10)
    assert hold.update(1, 29 * S // 10) is LEFT  # the refused value changed nothing
    hold.reset()
    assert hold.update(1, 30 * S // 10) is STRAIGHT  # nothing held: off means straight at once
