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
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from .kinematics import DEFAULT_KINEMATIC_LIMITS, KinematicLimits, check_plan_kinematics

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
    # per number read, its characters [start, end) in the text given to parse_waypoints
    spans: tuple[tuple[int, int], ...] = ()

    def waypoint_spans(self) -> tuple[tuple[tuple[int, int], tuple[int, int]], ...]:
        """Per waypoint the character spans of its x and y numbers (empty when invalid)."""
        if not self.valid:
            return ()
        return tuple((self.spans[2 * i], self.spans[2 * i + 1]) for i in range(len(self.waypoints)))


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


def _read_numbers(text: str, numbers: list[float], spans: list[tuple[int, int]]) -> None:
    """Append the numbers of ``text`` to ``numbers`` (their character spans to ``spans``); raise
    _AnswerSyntaxError on anything else."""
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
            spans.append((position, end))
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
    spans: list[tuple[int, int]] = []
    before_end = _cut_at_end_token(str(text))
    answer = before_end.strip()
    if not answer:
        return _invalid("empty answer", numbers)
    try:
        _read_numbers(answer, numbers, spans)
    except _AnswerSyntaxError as problem:
        return _invalid(str(problem), numbers)
    lead = len(before_end) - len(before_end.lstrip())
    spans = [(start + lead, end + lead) for start, end in spans]

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
    return PlanParse(valid=True, waypoints=tuple(waypoints), reason="", numbers=tuple(numbers), spans=tuple(spans))


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
    """The body of the first ``` fence (up to the closing fence or the end), else the text itself.

    A ``` after the JSON has begun (e.g. inside a label) opens no fence: otherwise a truncated answer, cut
    before that label, would be read differently from the whole answer."""
    opening = _FENCE_RE.search(text)
    if opening is None:
        return text
    json_start = [i for i in (text.find("["), text.find("{")) if i != -1]
    if json_start and min(json_start) < opening.start():
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
