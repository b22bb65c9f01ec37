"""Read waypoints, detections and VQA answers from model text.

Nothing here raises for any model text: a bad answer gives an invalid :class:`PlanParse` or an
empty :class:`DetectionParse` with a reason, so the caller can publish a diagnostic instead.
Only bad *arguments* (image size, limits) raise ``ValueError``.

Waypoint convention: the planning answer is ``2 * num_waypoints`` numbers ``x1,y1,x2,y2,...`` in
metres in the ego rear-axle frame at the observation time (x forward, y left). Waypoint ``i``
(0-based) is at ``t = dt * (i + 1)`` seconds. The answer has no heading, so the yaw of waypoint
``i`` is ``atan2`` of the step from the previous point (the origin before the first one); when that
step is shorter than 1 mm the previous yaw is kept (0.0 at the start).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

# Special tokens of the Qwen vocabulary look like <|name|>.
_SPECIAL_TOKEN_RE = re.compile(r"<\|[A-Za-z0-9_]+\|>")
_END_TOKENS = ("<|im_end|>", "<|endoftext|>")

_MIN_YAW_STEP_M = 1e-3


def _cut_at_end_token(text: str) -> str:
    """Text before the first end-of-answer token (anything after it is not part of the answer)."""
    cut = len(text)
    for token in _END_TOKENS:
        position = text.find(token)
        if position != -1:
            cut = min(cut, position)
    return text[:cut]


def clean_answer(text: str) -> str:
    """A VQA answer without surrounding whitespace and leftover special tokens.

    Text after the first ``<|im_end|>`` / ``<|endoftext|>`` is dropped; other ``<|...|>`` tokens are
    removed.
    """
    return _SPECIAL_TOKEN_RE.sub("", _cut_at_end_token(str(text))).strip()


def _snippet(text: str, position: int, width: int = 24) -> str:
    start = max(0, position - 8)
    piece = text[start : start + width]
    prefix = "…" if start > 0 else ""
    suffix = "…" if start + width < len(text) else ""
    return repr(prefix + piece + suffix)


# --------------------------------------------------------------------------------------------------
# Waypoints


@dataclass(frozen=True)
class Waypoint:
    """One planned pose: ``t`` seconds after the observation; ``x``, ``y`` metres (ego rear-axle
    frame, x forward, y left); ``yaw`` radians, derived from consecutive points."""

    t: float
    x: float
    y: float
    yaw: float


@dataclass(frozen=True)
class PlanParse:
    """Result of :func:`parse_waypoints`. ``reason`` is "" when valid; ``waypoints`` is empty when
    invalid; ``numbers`` holds what was read (up to the first syntax error)."""

    valid: bool
    waypoints: tuple[Waypoint, ...]
    reason: str
    numbers: tuple[float, ...]


_NUMBER_RE = re.compile(
    r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|nan|inf(?:inity)?)",
    re.IGNORECASE,
)
_SEPARATORS = frozenset(" \t\r\n,;")
_CLOSING = {"(": ")", "[": "]"}
_MAX_BRACKET_DEPTH = 2


class _AnswerSyntaxError(Exception):
    pass


@dataclass
class _Group:
    opener: str
    position: int
    first_number: int  # index into the number list where the group starts
    end_number: int = -1  # index just after its last number, set when it closes
    direct_numbers: int = 0
    has_children: bool = False


def _read_numbers(text: str, numbers: list[float]) -> None:
    """Append the numbers of ``text`` to ``numbers``; raise _AnswerSyntaxError on anything else."""
    stack: list[_Group] = []
    closed: list[_Group] = []
    position = 0
    length = len(text)
    while position < length:
        char = text[position]
        if char in _SEPARATORS:
            position += 1
        elif char in _CLOSING:
            if len(stack) == _MAX_BRACKET_DEPTH:
                raise _AnswerSyntaxError(f"brackets nested too deeply at {_snippet(text, position)}")
            if stack:
                stack[-1].has_children = True
            stack.append(_Group(char, position, len(numbers)))
            position += 1
        elif char in ")]":
            if not stack or _CLOSING[stack[-1].opener] != char:
                raise _AnswerSyntaxError(f"unmatched {char!r} at {_snippet(text, position)}")
            group = stack.pop()
            group.end_number = len(numbers)
            closed.append(group)
            position += 1
        else:
            match = _NUMBER_RE.match(text, position)
            if not match:
                raise _AnswerSyntaxError(f"unexpected text at {_snippet(text, position)}")
            end = match.end()
            if end < length and text[end] not in _SEPARATORS and text[end] not in "()[]":
                if match.group().lstrip("+-").isalpha():  # "information", "nancy": a word
                    raise _AnswerSyntaxError(f"unexpected text at {_snippet(text, position)}")
                raise _AnswerSyntaxError(
                    f"unexpected {text[end]!r} after number {match.group()!r} at {_snippet(text, end)}"
                )
            numbers.append(float(match.group()))
            if stack:
                stack[-1].direct_numbers += 1
            position = end
    if stack:
        raise _AnswerSyntaxError(f"unclosed {stack[-1].opener!r} at {_snippet(text, stack[-1].position)}")
    _check_groups(text, closed, len(numbers))


def _check_groups(text: str, groups: list[_Group], total_numbers: int) -> None:
    """Brackets may wrap (x, y) pairs, and one outer bracket may wrap the whole answer."""
    for group in groups:
        where = _snippet(text, group.position)
        wraps_everything = group.first_number == 0 and group.end_number == total_numbers > 0
        if group.has_children:
            if group.direct_numbers or not wraps_everything:
                raise _AnswerSyntaxError(f"brackets must wrap (x, y) pairs or the whole list, at {where}")
            continue
        if group.direct_numbers == 2:
            if group.first_number % 2:
                raise _AnswerSyntaxError(f"brackets at {where} wrap a y and the next x, not an (x, y) pair")
            continue
        if not (wraps_everything and len(groups) == 1):
            raise _AnswerSyntaxError(
                f"brackets must wrap (x, y) pairs, found {group.direct_numbers} number(s) at {where}"
            )


def _invalid(reason: str, numbers: list[float]) -> PlanParse:
    return PlanParse(valid=False, waypoints=(), reason=reason, numbers=tuple(numbers))


def parse_waypoints(
    text: str,
    num_waypoints: int = 8,
    dt: float = 0.5,
    max_abs_coord_m: float = 100.0,
    max_step_m: float = 20.0,
    kinematics: KinematicLimits | None = None,
    current_speed_mps: float | None = None,
    check_kinematics: bool = True,
) -> PlanParse:
    """Parse a planning answer of ``2 * num_waypoints`` numbers into waypoints (see module docstring).

    Separators may be commas, semicolons, whitespace or newlines; parentheses or brackets may wrap
    the (x, y) pairs (and one pair may wrap the whole list). Text after an end token is ignored.
    Anything else, a wrong count, a non-finite number, ``|coord| > max_abs_coord_m``, a path that
    breaks a kinematic rule (:func:`check_plan_kinematics` with ``kinematics``, default
    :data:`DEFAULT_KINEMATIC_LIMITS`; ``current_speed_mps`` adds the first-waypoint rule) or a step
    longer than ``max_step_m`` gives an invalid result with a specific reason. Nothing is padded or
    cut. ``check_kinematics=False`` skips the kinematic rules (format tests, raw answer statistics).
    """
    if isinstance(num_waypoints, bool) or not isinstance(num_waypoints, int) or num_waypoints < 1:
        raise ValueError(f"num_waypoints must be a positive integer, got {num_waypoints!r}")
    for name, value in (("dt", dt), ("max_abs_coord_m", max_abs_coord_m), ("max_step_m", max_step_m)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")

    numbers: list[float] = []
    answer = _cut_at_end_token(str(text)).strip()
    if not answer:
        return _invalid("empty answer", numbers)
    try:
        _read_numbers(answer, numbers)
    except _AnswerSyntaxError as problem:
        return _invalid(str(problem), numbers)

    expected = 2 * num_waypoints
    if len(numbers) != expected:
        return _invalid(f"expected {expected} numbers, got {len(numbers)}", numbers)
    for index, value in enumerate(numbers):
        if not math.isfinite(value):
            return _invalid(f"number {index + 1} is not finite ({value})", numbers)
    for index, value in enumerate(numbers):
        if abs(value) > max_abs_coord_m:
            axis = "xy"[index % 2]
            return _invalid(f"waypoint {index // 2 + 1} {axis}={value:g} m is beyond ±{max_abs_coord_m:g} m", numbers)

    if check_kinematics:
        points = [(numbers[2 * i], numbers[2 * i + 1]) for i in range(num_waypoints)]
        problem = check_plan_kinematics(points, dt, kinematics or DEFAULT_KINEMATIC_LIMITS, current_speed_mps)
        if problem:
            return _invalid(problem, numbers)

    waypoints: list[Waypoint] = []
    previous_x, previous_y, yaw = 0.0, 0.0, 0.0
    for index in range(num_waypoints):
        x, y = numbers[2 * index], numbers[2 * index + 1]
        step = math.hypot(x - previous_x, y - previous_y)
        if step > max_step_m:
            origin = "the origin" if index == 0 else f"waypoint {index}"
            return _invalid(
                f"step from {origin} to waypoint {index + 1} is {step:.2f} m, longer than {max_step_m:g} m",
                numbers,
            )
        if step >= _MIN_YAW_STEP_M:
            yaw = math.atan2(y - previous_y, x - previous_x)
        waypoints.append(Waypoint(t=dt * (index + 1), x=x, y=y, yaw=yaw))
        previous_x, previous_y = x, y
    return PlanParse(valid=True, waypoints=tuple(waypoints), reason="", numbers=tuple(numbers))


# --------------------------------------------------------------------------------------------------
# Kinematic plausibility


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


# --------------------------------------------------------------------------------------------------
# Detections


@dataclass(frozen=True)
class Detection:
    """One box in pixels of the original image (x right, y down) with an optional score."""

    label: str
    x_min: float
    y_min: float
    x_max: float
    y_max: float
    score: float | None


@dataclass(frozen=True)
class DetectionParse:
    """Result of :func:`parse_detections`: the good boxes, how many entries were skipped, whether a
    truncated answer was repaired, and a reason describing any problem ("" when there was none)."""

    detections: tuple[Detection, ...]
    skipped: int
    repaired: bool
    reason: str


_FENCE_RE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[ \t]*\r?\n?")
_MAX_SKIP_REASONS = 3


def _strip_fence(text: str) -> str:
    """The body of the first ``` fence (up to the closing fence or the end), else the text itself."""
    opening = _FENCE_RE.search(text)
    if opening is None:
        return text
    closing = text.find("```", opening.end())
    return text[opening.end() :] if closing == -1 else text[opening.end() : closing]


def _complete_object_spans(text: str, start: int) -> list[tuple[int, int]]:
    """Spans of the complete objects of the (possibly truncated) JSON list or object sequence at
    ``text[start]``; strings and escapes are respected, anything after the list's end is ignored."""
    spans: list[tuple[int, int]] = []
    depth = 0 if text[start] == "[" else 1  # an object sequence behaves like the inside of a list
    in_string = escaped = False
    object_start = -1
    for position in range(start, len(text)):
        char = text[position]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth == 2 and char == "{":
                object_start = position
        elif char in "]}":
            depth -= 1
            if depth == 1 and char == "}" and object_start >= 0:
                spans.append((object_start, position + 1))
                object_start = -1
            if depth <= 0:
                break
    return spans


def _decode_entries(body: str) -> tuple[list[Any], bool, str]:
    """JSON entries of the answer body, whether it had to be repaired, and a reason if none found."""
    starts = [p for p in (body.find("["), body.find("{")) if p != -1]
    if not starts:
        return [], False, f"no JSON list or object in answer {_snippet(body, 0)}"
    start = min(starts)
    decoder = json.JSONDecoder()
    try:
        value, end = decoder.raw_decode(body, start)
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer with too many digits
        value, end = None, -1
    if end != -1 and isinstance(value, list):
        return value, False, ""
    if end != -1 and isinstance(value, dict):
        entries: list[Any] = [value]
        position = end
        while True:  # a sequence of objects without the surrounding list
            while position < len(body) and body[position] in " \t\r\n,":
                position += 1
            if position >= len(body) or body[position] != "{":
                return entries, False, ""
            try:
                value, position = decoder.raw_decode(body, position)
            except (ValueError, RecursionError):
                break
            entries.append(value)
    # Truncated or malformed: keep every complete object.
    entries = []
    for object_start, object_end in _complete_object_spans(body, start):
        try:
            entries.append(json.loads(body[object_start:object_end]))
        except (ValueError, RecursionError):
            entries.append(_INVALID_OBJECT)  # counted as a skipped entry
    if not entries:
        return [], False, f"invalid or truncated JSON without a complete object: {_snippet(body, start)}"
    return entries, True, ""


_INVALID_OBJECT = object()


def _finite_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # a huge JSON integer
        return None
    return number if math.isfinite(number) else None


def _to_detection(entry: Any, width: int, height: int, scale: float) -> tuple[Detection | None, str]:
    if entry is _INVALID_OBJECT:
        return None, "invalid JSON object"
    if not isinstance(entry, dict):
        return None, "not a JSON object"
    label = entry.get("label")
    if not isinstance(label, str) or not label.strip():
        return None, "missing label"
    box = entry.get("bbox_2d", entry.get("bbox"))
    if not isinstance(box, list) or len(box) != 4:
        return None, "bbox_2d must be a list of 4 numbers"
    coords = [_finite_number(v) for v in box]
    if any(c is None for c in coords):
        return None, "bbox_2d has a non-numeric or non-finite value"
    x1, y1, x2, y2 = (min(max(float(c), 0.0), scale) for c in coords if c is not None)
    x_min, x_max = min(x1, x2), max(x1, x2)
    y_min, y_max = min(y1, y2), max(y1, y2)
    if x_max <= x_min or y_max <= y_min:
        return None, "box has no area"
    score: float | None = None
    for key in ("score", "confidence"):
        if key in entry:
            score = _finite_number(entry[key])
            if score is None:
                return None, f"{key} is not a finite number"
            break
    detection = Detection(
        label=label.strip(),
        x_min=x_min * width / scale,
        y_min=y_min * height / scale,
        x_max=x_max * width / scale,
        y_max=y_max * height / scale,
        score=score,
    )
    return detection, ""


def parse_detections(
    text: str, image_width: int, image_height: int, coordinate_scale: float = 1000.0
) -> DetectionParse:
    """Parse a Qwen3-VL grounding answer into pixel boxes of a ``image_width`` × ``image_height`` image.

    The answer is a JSON list of ``{"bbox_2d": [x1, y1, x2, y2], "label": ..., "score"/"confidence":
    optional}`` with coordinates relative to ``coordinate_scale`` (pixel = v * size / scale), maybe in
    a ```json fence, maybe a single object, maybe truncated (then every complete object is kept and
    ``repaired`` is True). Coordinates are clamped to [0, scale] and swapped into order; bad entries
    are skipped and counted. No text raises; a non-positive image size raises ``ValueError``.
    """
    for name, size in (("image_width", image_width), ("image_height", image_height)):
        if isinstance(size, bool) or not isinstance(size, Integral) or size <= 0:
            raise ValueError(f"{name} must be a positive integer, got {size!r}")
    if not (
        isinstance(coordinate_scale, Real)
        and not isinstance(coordinate_scale, bool)
        and math.isfinite(coordinate_scale)
        and coordinate_scale > 0
    ):
        raise ValueError(f"coordinate_scale must be a positive finite number, got {coordinate_scale!r}")
    scale = float(coordinate_scale)

    body = _strip_fence(_cut_at_end_token(str(text)))
    entries, repaired, reason = _decode_entries(body)
    if reason:
        return DetectionParse(detections=(), skipped=0, repaired=False, reason=reason)

    detections: list[Detection] = []
    skip_reasons: list[str] = []
    for index, entry in enumerate(entries):
        detection, problem = _to_detection(entry, image_width, image_height, scale)
        if detection is None:
            skip_reasons.append(f"entry {index + 1}: {problem}")
        else:
            detections.append(detection)
    notes = []
    if repaired:
        notes.append(f"truncated answer repaired, kept {len(entries)} complete object(s)")
    if skip_reasons:
        shown = "; ".join(skip_reasons[:_MAX_SKIP_REASONS])
        more = "; …" if len(skip_reasons) > _MAX_SKIP_REASONS else ""
        notes.append(f"skipped {len(skip_reasons)} of {len(entries)} entries ({shown}{more})")
    return DetectionParse(
        detections=tuple(detections), skipped=len(skip_reasons), repaired=repaired, reason="; ".join(notes)
    )
