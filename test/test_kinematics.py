"""The kinematic plausibility gate of ``parse_waypoints`` / ``check_plan_kinematics`` (hypothesis properties).

Feasible paths are simulated (speed and heading integrated in 10 ms steps with acceleration and curvature
inside the limits, sampled every 0.5 s and written with two decimals, as the model answers); each rule is
then broken on purpose and must be the one named in the reason.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wam_diff2_ros.core.kinematics import (
    DEFAULT_KINEMATIC_LIMITS,
    KINEMATIC_RULES,
    KinematicLimits,
    breach_size,
    check_plan_kinematics,
    rule_of,
)
from wam_diff2_ros.core.parsing import parse_waypoints

pytestmark = pytest.mark.core

LIMITS = DEFAULT_KINEMATIC_LIMITS
DT = 0.5
PROPERTIES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def answer(points) -> str:
    return ",".join(f"{x:.2f},{y:.2f}" for x, y in points)


def simulate(speed: float, controls, dt: float = DT, substeps: int = 50) -> list[tuple[float, float]]:
    """Positions at dt, 2dt, ... of a vehicle starting at the origin facing +x with ``speed``; ``controls`` holds
    one (acceleration, curvature) pair per waypoint interval (speed is kept at >= 0)."""
    x = y = heading = 0.0
    points = []
    h = dt / substeps
    for acceleration, curvature in controls:
        for _ in range(substeps):
            speed = max(0.0, speed + acceleration * h)
            x += speed * math.cos(heading) * h
            y += speed * math.sin(heading) * h
            heading += speed * curvature * h
        points.append((round(x, 2), round(y, 2)))
    return points


@st.composite
def feasible_paths(draw):
    """A start speed and 8 intervals of (acceleration, curvature) with a margin to every default limit; speeds
    stay below 22 m/s so the path stays inside the parser's ±100 m coordinate bound."""
    top = 22.0
    speed = draw(st.floats(0.0, top))
    controls = []
    v = speed
    for _ in range(8):
        acceleration = draw(st.floats(-0.8 * LIMITS.max_decel_mps2, 0.8 * LIMITS.max_accel_mps2))
        if v + acceleration * DT > top:
            acceleration = 0.0
        v_max = max(v, v + acceleration * DT, 0.1)
        # |curvature| <= 0.6 / min radius and v² |curvature| <= 0.7 a_lat at the interval's highest speed.
        bound = min(0.6 / LIMITS.min_turn_radius_m, 0.7 * LIMITS.max_lateral_accel_mps2 / v_max**2)
        controls.append((acceleration, draw(st.floats(-bound, bound))))
        v = max(0.0, v + acceleration * DT)
    return speed, controls


@PROPERTIES
@given(feasible_paths())
def test_smooth_feasible_paths_pass(path) -> None:
    speed, controls = path
    points = simulate(speed, controls)
    result = parse_waypoints(answer(points), current_speed_mps=speed)
    assert result.valid, result.reason


@PROPERTIES
@given(st.floats(LIMITS.max_speed_mps * 1.05, 45.0), st.integers(0, 7))
def test_speed_rule(speed, index) -> None:
    points = [(2.0 * (i + 1), 0.0) for i in range(8)]  # 4 m/s
    for i in range(index, 8):  # from waypoint index+1 on, one step at `speed` (then 4 m/s again)
        points[i] = (points[i][0] + speed * DT - 2.0, 0.0)
    result = parse_waypoints(answer(points))
    assert not result.valid and result.reason.startswith("speed rule"), result.reason
    assert f"to waypoint {index + 1} " in result.reason


@PROPERTIES
@given(st.floats(1.0, 15.0), st.floats(LIMITS.max_backward_m + 0.05, 10.0), st.integers(1, 7))
def test_backward_rule_and_allow_reverse(speed, back, index) -> None:
    step = speed * DT
    points = [(step * (i + 1), 0.0) for i in range(index)]
    x = points[-1][0]
    for _ in range(index, 8):
        x -= back
        points.append((x, 0.0))
        back = 0.0  # one step back, then standing still
    result = parse_waypoints(answer(points))
    assert not result.valid and result.reason.startswith("backward rule"), result.reason
    assert f"waypoint {index + 1} is" in result.reason


def test_reversing_is_allowed_when_configured() -> None:
    reversing = [(-1.0 * (i + 1), 0.0) for i in range(8)]  # 2 m/s backwards
    assert parse_waypoints(answer(reversing)).reason.startswith("backward rule")
    allowed = KinematicLimits(allow_reverse=True)
    assert parse_waypoints(answer(reversing), kinematics=allowed).valid
    # A shuttle manoeuvre: forward at 2 m/s, stop, back at 2 m/s (the change of direction is no curvature).
    shuttle = [(1.0, 0.0), (2.0, 0.0), (2.5, 0.0), (2.5, 0.0), (2.0, 0.0), (1.0, 0.0), (0.0, 0.0), (-1.0, 0.0)]
    assert parse_waypoints(answer(shuttle), kinematics=allowed).valid
    assert parse_waypoints(answer(shuttle)).reason.startswith("backward rule")


@PROPERTIES
@given(st.floats(4.0, 12.0), st.floats(1.15, 2.5), st.integers(0, 4), st.booleans())
def test_acceleration_and_deceleration_rules(speed, factor, index, braking) -> None:
    # Constant speed, then from interval index+1 on an acceleration (or braking) of factor × the limit for
    # three intervals (1.5 s: the two-step central difference then sees all of it), then constant speed.
    limit = LIMITS.max_decel_mps2 if braking else LIMITS.max_accel_mps2
    if braking:
        factor, index = min(factor, 1.4), min(index, 2)  # keeps the path inside ±100 m
    rate = -factor * limit if braking else factor * limit
    if braking and speed + 3 * rate * DT < 0.5:
        speed = -3 * rate * DT + 0.5  # stays moving
    controls = [(0.0, 0.0)] * 8
    controls[index + 1] = controls[index + 2] = controls[index + 3] = (rate, 0.0)
    points = simulate(speed, controls)
    result = parse_waypoints(answer(points))
    rule = "deceleration" if braking else "acceleration"
    assert not result.valid and result.reason.startswith(f"{rule} rule"), result.reason


def test_one_misplaced_waypoint_is_answer_noise_not_an_acceleration() -> None:
    # The demo model at 8 m/s: step speeds 8.2, 8.2, 9.8, 8.0, 11.8, 10.0, 10.0, 8.0 m/s (single-step
    # differences up to 7.6 m/s²); over two steps the speed changes by at most 2.0 m/s per second.
    text = "4.11,0.00,8.21,0.00,13.10,0.00,17.10,0.01,23.00,0.01,28.00,0.00,33.00,0.01,37.00,0.01"
    assert parse_waypoints(text, current_speed_mps=8.0).valid


@PROPERTIES
@given(st.floats(10.0, 30.0), st.floats(1.3, 3.0))
def test_lateral_acceleration_rule(speed, factor) -> None:
    radius = speed**2 / (factor * LIMITS.max_lateral_accel_mps2)  # >= 4.2 m at 10 m/s... checked below
    if radius < 1.5 * LIMITS.min_turn_radius_m:
        radius = 1.5 * LIMITS.min_turn_radius_m
    if speed**2 / radius <= 1.2 * LIMITS.max_lateral_accel_mps2:
        return
    points = simulate(speed, [(0.0, 1.0 / radius)] * 8)
    result = parse_waypoints(answer(points))
    assert not result.valid and result.reason.startswith("lateral acceleration rule"), result.reason


@PROPERTIES
@given(st.floats(1.3, 3.0), st.floats(0.3, 0.7))
def test_curvature_rule(speed, radius_share) -> None:
    radius = radius_share * LIMITS.min_turn_radius_m
    if speed**2 / radius >= LIMITS.max_lateral_accel_mps2:
        return
    points = simulate(speed, [(0.0, 1.0 / radius)] * 8)
    result = parse_waypoints(answer(points))
    assert not result.valid and result.reason.startswith("curvature rule"), result.reason


@PROPERTIES
@given(feasible_paths(), st.floats(1.2, 5.0), st.booleans())
def test_first_waypoint_rule(path, factor, faster) -> None:
    speed, controls = path
    points = simulate(speed, controls)
    distance = math.hypot(*points[0])
    offset = factor * LIMITS.first_waypoint_tolerance_m / DT
    claimed = distance / DT + offset if faster else distance / DT - offset
    if claimed < 0:
        return
    result = parse_waypoints(answer(points), current_speed_mps=claimed)
    assert not result.valid and result.reason.startswith("first waypoint rule"), result.reason
    assert parse_waypoints(answer(points)).valid  # without the speed, the rule does not run


# --- the cases


def test_reversing_zig_zag_is_invalid() -> None:
    # x 28.0 → 25.0 → 22.0 → 26.1 → 38.1 m (accepted before this gate: only the step length was checked).
    text = "6.0,0.0,13.0,0.1,20.5,0.2,28.0,0.3,25.0,0.3,22.0,0.4,26.1,0.4,38.1,0.5"
    result = parse_waypoints(text)
    assert not result.valid
    assert result.reason.startswith("backward rule: waypoint 5 is 3.00 m behind waypoint 4"), result.reason


def test_sixty_metres_per_second_jump_is_invalid() -> None:
    text = "5.0,0.0,10.0,0.0,15.0,0.0,45.0,0.0,50.0,0.0,55.0,0.0,60.0,0.0,65.0,0.0"
    result = parse_waypoints(text)
    assert not result.valid
    assert result.reason.startswith("speed rule: step from waypoint 3 to waypoint 4 is 30.00 m"), result.reason
    assert "60.0 m/s" in result.reason


def test_smooth_curve_is_valid() -> None:
    points = simulate(8.0, [(0.0, 1.0 / 25.0)] * 8)  # 8 m/s on a 25 m radius: 2.6 m/s² lateral
    assert parse_waypoints(answer(points), current_speed_mps=8.0).valid
    trained = "2.26,-0.17,4.43,-0.70,6.52,-1.55,8.48,-2.64,10.28,-3.88,11.99,-5.25,13.76,-6.83,15.59,-8.59"
    assert parse_waypoints(trained, current_speed_mps=4.66).valid  # the reference README's sample


def test_the_gate_can_be_skipped_and_limits_are_checked() -> None:
    text = "5.0,0.0,10.0,0.0,15.0,0.0,45.0,0.0,50.0,0.0,55.0,0.0,60.0,0.0,65.0,0.0"
    assert parse_waypoints(text, check_kinematics=False).reason.startswith("step from waypoint 3")
    loose = KinematicLimits(max_speed_mps=70.0, max_accel_mps2=200.0, max_decel_mps2=200.0)
    assert parse_waypoints(text, kinematics=loose).reason.startswith("step from waypoint 3 to waypoint 4 is 30.00 m")
    for bad in ({"max_speed_mps": 0.0}, {"max_decel_mps2": float("nan")}, {"max_backward_m": -1.0}):
        with pytest.raises(ValueError):
            KinematicLimits(**bad)
    assert check_plan_kinematics([], DT) == ""


# --- reading a reason back: which rule, and how far it was broken


def _breach(rule: str, amount: float) -> str:
    """The gate's reason for a path that breaks `rule` by an amount growing with `amount` (1 or 2)."""
    speed = None
    if rule == "speed":
        points = [(2.0 * (i + 1), 0.0) for i in range(8)]
        points[3:] = [(x + 40.0 * amount * DT, 0.0) for x, _ in points[3:]]
    elif rule == "backward":
        points = [(2.0, 0.0), (4.0, 0.0), *[(4.0 - amount, 0.0)] * 6]
    elif rule in ("acceleration", "deceleration"):  # three steps at one speed, then five at another
        before, after = (8.0, 8.0 + 6.0 * amount) if rule == "acceleration" else (30.0, 30.0 - 11.0 * amount - 0.5)
        steps = [before * DT] * 3 + [after * DT] * 5
        points = [(sum(steps[: i + 1]), 0.0) for i in range(8)]
    elif rule == "lateral acceleration":
        points = simulate(15.0, [(0.0, amount * 1.5 * LIMITS.max_lateral_accel_mps2 / 15.0**2)] * 8)
    elif rule == "curvature":
        points = simulate(2.0, [(0.0, 1.0 / (LIMITS.min_turn_radius_m * (0.8 - 0.3 * amount)))] * 8)
    else:  # first waypoint
        points, speed = simulate(5.0, [(0.0, 0.0)] * 8), 5.0 + amount * 2 * LIMITS.first_waypoint_tolerance_m / DT
    return check_plan_kinematics(points, DT, current_speed_mps=speed)


@pytest.mark.parametrize("rule", KINEMATIC_RULES)
def test_a_reason_names_its_rule_and_how_far_it_was_broken(rule) -> None:
    small, large = _breach(rule, 1.0), _breach(rule, 2.0)
    assert rule_of(small) == rule_of(large) == rule, (small, large)
    assert breach_size(small) is not None and breach_size(large) is not None
    assert breach_size(large) > breach_size(small), (small, large)


def test_other_reasons_have_no_rule() -> None:
    for reason in ("expected 16 numbers, got 15", "stale plan: 1.2 s old", "", "speed limit: 3 m/s"):
        assert rule_of(reason) is None and breach_size(reason) is None
    suffixed = _breach("curvature", 1.0) + " (no end token within 128 new tokens)"
    assert rule_of(suffixed) == "curvature" and breach_size(suffixed) == breach_size(_breach("curvature", 1.0))
