"""What the live view shows of one planning instant, as plain data (:class:`PlanUpdate` → :class:`ViewFrame`).

ROS-free and Foxglove-free: :func:`view_frame` turns a plan (the core :class:`PlanResult` with the runtime's
stale / withheld verdict) into the numbers every channel is drawn from: waypoints in base_link and in the
odometry's frame (a rejected answer's own waypoints where it still reads as waypoints), their colours (by
confidence where the decoder gives one, else by status; a rejected plan's in the rejected colour), the status
(``valid``, ``rejected``, ``stale``, ``blocked``) and the JSON the info / diagnostics channels carry.
:mod:`.live` encodes them in Foxglove's schemas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from wam_diff2_ros.core.planning import PlanResult

Rgba = tuple[float, float, float, float]

#: Colours per status (valid: green, rejected by the gate or the parser: red, stale: orange, blocked: grey).
STATUS_COLORS: dict[str, Rgba] = {
    "valid": (0.12, 0.85, 0.3, 1.0),
    "rejected": (0.95, 0.2, 0.2, 1.0),
    "stale": (1.0, 0.6, 0.1, 1.0),
    "blocked": (0.6, 0.6, 0.6, 1.0),
}


@dataclass(frozen=True)
class PlanUpdate:
    """One planning instant handed to the viewer (references only: built on the planning thread in µs).

    ``result`` None: the instant was blocked (``problems`` say why). ``stale``: the age gate invalidated the
    plan; ``note``: why an answered plan got no Path (the runtime's ``PlanCycle.withheld``).
    """

    now_ns: int
    result: PlanResult | None = None
    problems: tuple[str, ...] = ()
    stale: bool = False
    note: str = ""
    end_to_end_ms: float = 0.0
    #: the name of ``end_to_end_ms`` in the plan info: the node's latency from the image stamp to the output, or
    #: a replay's ``schedule_delay_ms`` (the bag-clock gap from the image to the planning tick, no model time)
    delay_name: str = "end_to_end_ms"


#: Candidate plans (planning.candidates > 1) not published: faint, by validity.
CANDIDATE_COLORS: dict[bool, Rgba] = {True: (0.3, 0.85, 0.45, 0.35), False: (0.95, 0.25, 0.2, 0.25)}


@dataclass(frozen=True)
class CandidateLine:
    """A candidate plan that was not published, drawn faintly: its row, validity and waypoints (base_link and the
    odometry's frame)."""

    index: int
    valid: bool
    points: tuple[tuple[float, float], ...]
    points_fixed: tuple[tuple[float, float], ...]
    color: Rgba


@dataclass(frozen=True)
class ViewFrame:
    """The drawable content of one :class:`PlanUpdate`."""

    stamp_ns: int
    status: str
    reason: str
    waypoints: tuple[tuple[float, float], ...]  # base_link, metres
    colors: tuple[Rgba, ...]
    confidence: tuple[float, ...]  # per waypoint; empty when the decoder gives none
    fixed_frame: str  # the odometry's frame ("" without an ego pose)
    ego_pose: tuple[float, float, float] | None  # x, y, yaw of base_link in fixed_frame
    waypoints_fixed: tuple[tuple[float, float], ...]
    info: dict[str, Any] = field(default_factory=dict)
    candidates: tuple[CandidateLine, ...] = ()  # the unpublished candidates of a batch


def confidence_color(value: float) -> Rgba:
    """Red (0) → yellow (0.5) → green (1); values outside [0, 1] are clamped, NaN is grey."""
    if not math.isfinite(value):
        return STATUS_COLORS["blocked"]
    c = min(1.0, max(0.0, value))
    return (min(1.0, 2.0 * (1.0 - c)), min(1.0, 2.0 * c), 0.1, 1.0)


def _confidence(result: PlanResult) -> tuple[tuple[float, ...], float | None]:
    """Per-waypoint and plan confidence where the result carries them (an empty tuple / None otherwise)."""
    per_waypoint = getattr(result, "waypoint_confidence", None) or ()
    values = tuple(float(v) for v in per_waypoint)
    plan = getattr(result, "confidence", None)
    return values, (float(plan) if isinstance(plan, (int, float)) and not isinstance(plan, bool) else None)


def status_of(update: PlanUpdate) -> str:
    """``blocked`` (no result), ``stale`` (the age gate), ``rejected`` (invalid answer) or ``valid``."""
    result = update.result
    if result is None:
        return "blocked"
    if update.stale:
        return "stale"
    return "valid" if result.valid else "rejected"


def view_frame(update: PlanUpdate) -> ViewFrame:
    """What to draw for ``update`` (see the module docstring)."""
    result = update.result
    status = status_of(update)
    if result is None:
        reason = "; ".join(update.problems) or "blocked"
        info = {"status": status, "valid": False, "reason": reason, "problems": list(update.problems)}
        return ViewFrame(update.now_ns, status, reason, (), (), (), "", None, (), info)
    observation = result.observation
    # a rejected answer that still reads as waypoints is drawn in the rejected colour, with its confidence in info
    shown = result.waypoints or getattr(result, "rejected_waypoints", ())
    waypoints = tuple((float(w.x), float(w.y)) for w in shown)
    confidence, plan_confidence = _confidence(result)
    if len(confidence) != len(waypoints):
        confidence = ()
    by_status = (STATUS_COLORS[status],) * len(waypoints)
    colors = tuple(confidence_color(c) for c in confidence) if confidence and status != "rejected" else by_status
    pose = observation.ego_pose
    fixed_frame, ego, fixed = "", None, ()
    if pose is not None:
        fixed_frame, ego = pose.frame_id, (float(pose.x), float(pose.y), float(pose.yaw))
        fixed = tuple(pose.transform(x, y)[:2] for x, y in waypoints)
    vx, vy = observation.velocity
    timing = result.timing.milliseconds()
    delay = timing.pop("end_to_end_ms", 0.0)
    timing[update.delay_name] = update.end_to_end_ms or delay
    reason = result.reason or update.note
    info = {
        "status": status,
        "valid": status == "valid",
        "reason": reason,
        "command": observation.command.value,
        "speed_mps": math.hypot(vx, vy),
        "velocity": [float(vx), float(vy)],
        "confidence": plan_confidence,
        "waypoint_confidence": list(confidence),
        "waypoints": [list(p) for p in waypoints],
        "timing": timing,
        "steps_per_block": list(result.steps_per_block),
        "decode_steps": int(sum(result.steps_per_block)),
        "finished": bool(result.finished),
        "model": result.model,
        "raw_text": result.raw_text,
        "camera_frame": observation.front.frame_id or f"{observation.front.camera}_optical",
    }
    lines = candidate_lines(result)
    if result.candidates:
        info["chosen_candidate"] = result.chosen_candidate
        info["candidates"] = [
            {k: v for k, v in c.as_record().items() if k != "waypoint_confidence"} for c in result.candidates
        ]
    return ViewFrame(
        result.stamp_ns, status, reason, waypoints, colors, confidence, fixed_frame, ego, fixed, info, lines
    )


def candidate_lines(result: PlanResult) -> tuple[CandidateLine, ...]:
    """The candidates of ``result`` other than the published plan, with waypoints to draw."""
    pose = result.observation.ego_pose
    lines = []
    for candidate in result.candidates:
        if (candidate.index == result.chosen_candidate and result.valid) or not candidate.waypoints:
            continue
        points = tuple((float(w.x), float(w.y)) for w in candidate.waypoints)
        fixed = tuple(pose.transform(x, y)[:2] for x, y in points) if pose is not None else ()
        lines.append(CandidateLine(candidate.index, candidate.valid, points, fixed, CANDIDATE_COLORS[candidate.valid]))
    return tuple(lines)
