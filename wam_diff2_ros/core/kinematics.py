"""Kinematic plausibility of a planned path: can a passenger car drive these waypoints?

:func:`check_plan_kinematics` applies :class:`KinematicLimits` (defaults from vehicle dynamics, see the
class) to the (x, y) waypoints of a planning answer in base_link; :func:`~.parsing.parse_waypoints` calls it
by default so that a caller that forgets the gate still gets it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real

#: A comfortable deceleration (m/s²), within NAVSIM's comfort bound (4.05): how hard the closed loop's controller
#: brakes when no plan is in force (``drive/controller.py``) and how the egodriver policy's stop brakes.
COMFORTABLE_DECEL_MPS2 = 2.0


@dataclass(frozen=True)
class KinematicLimits:
    """Limits of the kinematic plausibility gate (:func:`check_plan_kinematics`).

    The gate rejects answers no passenger car can drive; it is not a comfort filter. Defaults and where
    they come from (typical passenger-car figures, e.g. Rajamani, *Vehicle Dynamics and Control*, 2nd ed.,
    and Gillespie, *Fundamentals of Vehicle Dynamics*; ISO 15622/22179 comfort limits are far lower):

    * ``max_speed_mps`` 40 m/s (144 km/h): above every public-road limit in NAVSIM's cities and most
      motorways (130 km/h = 36 m/s) with a margin;
    * ``max_accel_mps2`` 5 m/s² (≈ 0.5 g): a strong passenger car's full-throttle launch (0–100 km/h in
      ≈ 5.5 s); ordinary cars reach 2.5–4 m/s²;
    * ``max_decel_mps2`` 10 m/s² (≈ 1 g): emergency braking with ABS on dry asphalt (tyre–road friction
      μ ≈ 0.9–1.0); wet roads give 5–7 m/s²;
    * ``max_lateral_accel_mps2`` 8 m/s² (≈ 0.8 g): the skid-pad limit of ordinary passenger cars on dry
      asphalt (0.75–0.9 g); everyday driving stays below 3–4 m/s²;
    * ``min_turn_radius_m`` 4 m: below the 4.5–6 m minimum turning radius of passenger cars (kerb to
      kerb ≈ 10–12 m circle), measured at the rear axle;
    * ``max_backward_m`` 0.5 m: motion against the direction of travel between consecutive waypoints
      tolerated as answer noise (a stopped car's waypoints jitter by centimetres);
    * ``allow_reverse`` False: reversing manoeuvres (parking, three-point turns) are rejected unless set;
    * ``first_waypoint_tolerance_m`` 3 m: the first waypoint may differ from ``speed × dt`` by this much
      (≈ 1.25 m of full braking over 0.5 s, ½·10·0.5², plus speed-sensor and answer error).

    Heading-based rules (lateral acceleration, curvature) skip steps shorter than
    ``min_heading_step_m`` (0.5 m), where a two-decimal answer's heading is noise.
    """

    max_speed_mps: float = 40.0
    max_accel_mps2: float = 5.0
    max_decel_mps2: float = 10.0
    max_lateral_accel_mps2: float = 8.0
    min_turn_radius_m: float = 4.0
    max_backward_m: float = 0.5
    allow_reverse: bool = False
    first_waypoint_tolerance_m: float = 3.0
    min_heading_step_m: float = 0.5

    def __post_init__(self) -> None:
        for name in (
            "max_speed_mps",
            "max_accel_mps2",
            "max_decel_mps2",
            "max_lateral_accel_mps2",
            "min_turn_radius_m",
            "first_waypoint_tolerance_m",
            "min_heading_step_m",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        if (
            not (isinstance(self.max_backward_m, Real) and math.isfinite(self.max_backward_m))
            or self.max_backward_m < 0
        ):
            raise ValueError(f"max_backward_m must be a finite number >= 0, got {self.max_backward_m!r}")
        if not isinstance(self.allow_reverse, bool):
            raise ValueError(f"allow_reverse must be a bool, got {self.allow_reverse!r}")


DEFAULT_KINEMATIC_LIMITS = KinematicLimits()
KINEMATIC_RULES = (
    "backward",
    "speed",
    "acceleration",
    "deceleration",
    "lateral acceleration",
    "curvature",
    "first waypoint",
)


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


def _where(index: int) -> str:
    return "the origin" if index == 0 else f"waypoint {index}"


def check_plan_kinematics(
    points: Sequence[tuple[float, float]],
    dt: float,
    limits: KinematicLimits = DEFAULT_KINEMATIC_LIMITS,
    current_speed_mps: float | None = None,
) -> str:
    """Why ``points`` (x, y in base_link, waypoint ``i`` at ``dt·(i+1)`` s) cannot be driven, "" when they can.

    Rules, checked step by step along the path (the first violation is reported, its reason starts with
    the rule's name, one of :data:`KINEMATIC_RULES`): *backward* (a step goes more than
    ``max_backward_m`` against the vehicle's heading, unless ``allow_reverse``), *speed* (step length /
    dt), *acceleration* / *deceleration* (change of the signed step speed over two steps, i.e. a
    central difference over 2·dt, which tolerates one slightly misplaced waypoint), *lateral
    acceleration* (speed × heading change per time) and *curvature* (heading change per arc length
    against ``min_turn_radius_m``). The vehicle starts at the origin facing +x. With
    ``current_speed_mps`` (the ego speed, e.g. from odometry) the *first waypoint* rule also runs: the
    first waypoint must lie ``current_speed × dt`` ± ``first_waypoint_tolerance_m`` from the origin.
    """
    if current_speed_mps is not None and points:
        speed = abs(float(current_speed_mps))
        if math.isfinite(speed):
            expected = speed * dt
            distance = math.hypot(points[0][0], points[0][1])
            if abs(distance - expected) > limits.first_waypoint_tolerance_m:
                return (
                    f"first waypoint rule: waypoint 1 is {distance:.2f} m from the ego, but the current speed "
                    f"{speed:.2f} m/s × {dt:g} s is {expected:.2f} m "
                    f"(tolerance {limits.first_waypoint_tolerance_m:g} m)"
                )
    heading = 0.0  # the vehicle's heading (it faces +x at the origin)
    since_m, since_s = 0.0, 0.0  # path length and time since the point where ``heading`` was measured
    speeds: list[float] = []  # signed step speeds (negative while reversing)
    px, py = 0.0, 0.0
    for index, (x, y) in enumerate(points):
        dx, dy = x - px, y - py
        length = math.hypot(dx, dy)
        speed = length / dt
        if speed > limits.max_speed_mps:
            return (
                f"speed rule: step from {_where(index)} to waypoint {index + 1} is {length:.2f} m in {dt:g} s = "
                f"{speed:.1f} m/s, above {limits.max_speed_mps:g} m/s"
            )
        along = dx * math.cos(heading) + dy * math.sin(heading)
        if along < -limits.max_backward_m and not limits.allow_reverse:
            return (
                f"backward rule: waypoint {index + 1} is {-along:.2f} m behind {_where(index)} along the direction "
                f"of travel (tolerance {limits.max_backward_m:g} m; reversing needs planning.kinematics.allow_reverse)"
            )
        signed = -speed if speeds and speeds[-1] < 0 else speed
        direction = math.atan2(dy, dx)
        against = abs(_wrap(direction - heading)) > math.pi / 2
        # A step against the heading within the backward tolerance is noise: it sets no new heading.
        if length >= limits.min_heading_step_m and (limits.allow_reverse or not against):
            new_heading = _wrap(direction + math.pi) if against else direction
            signed = -speed if against else speed
            turn = abs(_wrap(new_heading - heading))
            # A chord's direction is the heading at its middle: the turn happened over the path since the
            # point where the last heading was measured (the origin, or the middle of an earlier step).
            arc = since_m + length / 2.0
            span_s = since_s + dt / 2.0
            mean_speed = arc / span_s
            lateral = mean_speed * turn / span_s
            if lateral > limits.max_lateral_accel_mps2:
                return (
                    f"lateral acceleration rule: heading turns {math.degrees(turn):.0f}° by waypoint {index + 1} at "
                    f"{mean_speed:.1f} m/s = {lateral:.1f} m/s² lateral, above {limits.max_lateral_accel_mps2:g} m/s²"
                )
            if turn / arc > 1.0 / limits.min_turn_radius_m:
                return (
                    f"curvature rule: heading turns {math.degrees(turn):.0f}° over {arc:.2f} m by waypoint "
                    f"{index + 1}, a {arc / turn:.1f} m radius, below the {limits.min_turn_radius_m:g} m minimum"
                )
            heading = new_heading
            since_m, since_s = length / 2.0, dt / 2.0
        else:
            since_m, since_s = since_m + length, since_s + dt
        if len(speeds) >= 2:
            # Central difference over two steps (1 s at dt 0.5 s): a single waypoint that is a little off
            # (answer noise) moves one step speed up and the next down and mostly cancels out.
            earlier = speeds[-2]
            change = (signed - earlier) / (2.0 * dt)
            speeding_up = abs(signed) > abs(earlier) and signed * earlier >= 0
            limit = limits.max_accel_mps2 if speeding_up else limits.max_decel_mps2
            if abs(change) > limit:
                rule = "acceleration" if speeding_up else "deceleration"
                return (
                    f"{rule} rule: step speed goes from {abs(earlier):.1f} to {abs(signed):.1f} m/s in "
                    f"{2 * dt:g} s by waypoint {index + 1} = {abs(change):.1f} m/s², above {limit:g} m/s²"
                )
        speeds.append(signed)
        px, py = x, y
    return ""


# The figure in each rule's reason that says how far a plan broke it, and its sign (+1: larger is worse; the
# curvature rule's radius is worse the smaller it is). Next to the messages above so that both change together.
_BREACH_FIGURES: dict[str, tuple[re.Pattern[str], float]] = {
    "backward": (re.compile(r"is (\d+(?:\.\d+)?) m behind"), 1.0),
    "speed": (re.compile(r"= (\d+(?:\.\d+)?) m/s, above"), 1.0),
    "acceleration": (re.compile(r"= (\d+(?:\.\d+)?) m/s², above"), 1.0),
    "deceleration": (re.compile(r"= (\d+(?:\.\d+)?) m/s², above"), 1.0),
    "lateral acceleration": (re.compile(r"= (\d+(?:\.\d+)?) m/s² lateral"), 1.0),
    "curvature": (re.compile(r"a (\d+(?:\.\d+)?) m radius"), -1.0),
}
_FIRST_WAYPOINT = re.compile(r"is (\d+(?:\.\d+)?) m from the ego.* is (\d+(?:\.\d+)?) m \(tolerance")


def rule_of(reason: str) -> str | None:
    """The kinematic rule (one of :data:`KINEMATIC_RULES`) a reason of :func:`check_plan_kinematics` names, or
    None for any other reason."""
    for rule in sorted(KINEMATIC_RULES, key=len, reverse=True):  # "lateral acceleration" before "acceleration"
        if reason.startswith(f"{rule} rule:"):
            return rule
    return None


def breach_size(reason: str) -> float | None:
    """How far the plan broke its rule, read from a reason of :func:`check_plan_kinematics` (larger: worse;
    the measured m, m/s, m/s², minus the radius in m for curvature, the distance off in m for the first
    waypoint); None when the reason is not a kinematic rule's."""
    rule = rule_of(reason)
    if rule is None:
        return None
    if rule == "first waypoint":
        found = _FIRST_WAYPOINT.search(reason)
        return abs(float(found.group(1)) - float(found.group(2))) if found else None
    pattern, sign = _BREACH_FIGURES[rule]
    found = pattern.search(reason)
    return sign * float(found.group(1)) if found else None
