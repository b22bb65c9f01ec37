"""One JSON record per planning / detection instant (``predictions.jsonl``, ``detections.jsonl``)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from wam_diff2_ros.core.units import NS_PER_S

#: A replay's name for the runtime's ``end_to_end_ms``: on the bag clock the outputs are built at the planning tick,
#: so it is the gap from the image stamp to the tick, without the model's time (``total_ms``).
SCHEDULE_DELAY = "schedule_delay_ms"


def _timing_dict(timing: Any, wall_ms: float) -> dict[str, float]:
    """The record's ``timing``: the stage times (:meth:`StageTiming.milliseconds`, ``end_to_end_ms`` named
    :data:`SCHEDULE_DELAY`) and the replay's wall time."""
    stages = timing.milliseconds()
    delay = stages.pop("end_to_end_ms", 0.0)
    return {**stages, SCHEDULE_DELAY: delay, "wall_ms": wall_ms}


def plan_record(index: int, t_ns: int, bag_start_ns: int, cycle: Any, wall_ms: float) -> dict[str, Any]:
    """One ``predictions.jsonl`` line for a non-idle planning instant."""
    record: dict[str, Any] = {
        "instant": index,
        "t_ns": t_ns,
        "t_s": round((t_ns - bag_start_ns) / NS_PER_S, 9),
    }
    result = cycle.result
    if result is None:
        record.update(
            status="blocked",
            stamp_ns=None,
            valid=False,
            reason="; ".join(str(p) for p in cycle.problems),
            problems=[str(p) for p in cycle.problems],
            waypoints=None,
            timing={"wall_ms": wall_ms},
        )
        return record
    obs = result.observation
    record.update(
        status="planned",
        stamp_ns=result.stamp_ns,
        valid=bool(result.valid),
        reason=result.reason,
        problems=[],
        command=obs.command.value,
        command_source=obs.command_source,
        velocity=[float(obs.velocity[0]), float(obs.velocity[1])],
        acceleration=[float(obs.acceleration[0]), float(obs.acceleration[1])],
        acceleration_source=obs.acceleration_source,
        odometry_stamp_ns=obs.odometry_stamp_ns,
        image_stamps_ns=[f.stamp_ns for f in obs.frames],
        prompt=result.prompt,
        raw_text=result.raw_text,
        waypoints=[[float(w.x), float(w.y)] for w in result.waypoints] if result.valid else None,
        yaw=[float(w.yaw) for w in result.waypoints] if result.valid else None,
        rejected_waypoints=[[float(w.x), float(w.y)] for w in result.rejected_waypoints] or None,
        fixed_frame=cycle.path_fixed.header.frame_id if cycle.path_fixed is not None else None,
        waypoints_fixed=(
            [[float(p.pose.position.x), float(p.pose.position.y)] for p in cycle.path_fixed.poses]
            if cycle.path_fixed is not None
            else None
        ),
        autoware_trajectory=_autoware_points(cycle.autoware_trajectory),
        steps_per_block=list(result.steps_per_block),
        finished=bool(result.finished),
        confidence=float(result.confidence),
        answer_confidence=result.answer_confidence,
        waypoint_confidence=[float(c) for c in result.waypoint_confidence],
        waypoint_token_probabilities=[[float(p) for p in tokens] for tokens in result.waypoint_token_probabilities],
        deadline_ms=float(result.deadline_ms),
        deadline_met=bool(result.deadline_met),
        early_tokens=int(result.early_tokens),
        model=result.model,
        timing=_timing_dict(result.timing, wall_ms),
    )
    if result.candidates:  # planning.candidates > 1: every answer of the batch and which one is this plan
        record.update(
            candidates=[candidate.as_record() for candidate in result.candidates],
            chosen_candidate=result.chosen_candidate,
        )
    return record


def _autoware_points(trajectory: Any) -> list[dict[str, float]] | None:
    """The Autoware trajectory's points (``autoware.outputs``; in the odometry's frame) or None."""
    if trajectory is None:
        return None
    points = []
    for p in trajectory.points:
        q = p.pose.orientation
        points.append(
            {
                "t": p.time_from_start.sec + p.time_from_start.nanosec / NS_PER_S,
                "x": float(p.pose.position.x),
                "y": float(p.pose.position.y),
                "yaw": 2.0 * math.atan2(float(q.z), float(q.w)),
                "v": float(p.longitudinal_velocity_mps),
                "a": float(p.acceleration_mps2),
                "heading_rate": float(p.heading_rate_rps),
                "front_wheel_angle": float(p.front_wheel_angle_rad),
            }
        )
    return points


def error_record(index: int, t_ns: int, bag_start_ns: int, exc: BaseException, wall_ms: float) -> dict[str, Any]:
    """A ``predictions.jsonl`` line for an instant where the engine raised."""
    message = f"{type(exc).__name__}: {exc}"
    return {
        "instant": index,
        "t_ns": t_ns,
        "t_s": round((t_ns - bag_start_ns) / NS_PER_S, 9),
        "status": "error",
        "stamp_ns": None,
        "valid": False,
        "reason": f"engine error: {message}",
        "problems": [f"engine error: {message}"],
        "waypoints": None,
        "timing": {"wall_ms": wall_ms},
    }


def detection_record(t_ns: int, bag_start_ns: int, cycle: Any, wall_ms: float) -> dict[str, Any]:
    """One ``detections.jsonl`` line."""
    record: dict[str, Any] = {"t_ns": t_ns, "t_s": round((t_ns - bag_start_ns) / NS_PER_S, 9)}
    result = cycle.result
    if result is None:
        record.update(status="blocked", problems=[str(p) for p in cycle.problems], timing={"wall_ms": wall_ms})
        return record
    record.update(
        status="detected",
        stamp_ns=result.stamp_ns,
        camera=result.camera,
        width=result.width,
        height=result.height,
        detections=[
            {"label": d.label, "box_px": [d.x_min, d.y_min, d.x_max, d.y_max], "score": d.score}
            for d in result.detections
        ],
        skipped=result.skipped,
        reason=result.reason,
        prompt=result.prompt,
        raw_text=result.raw_text,
        timing=_timing_dict(result.timing.with_end_to_end(cycle.end_to_end_ms), wall_ms),
    )
    return record


def json_line(record: Mapping[str, Any]) -> str:
    from wam_diff2_ros.replay.evaluation import to_jsonable

    return json.dumps(to_jsonable(record), ensure_ascii=False, allow_nan=False)
