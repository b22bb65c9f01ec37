"""Candidate plans (``planning.candidates`` > 1, core/candidates.py) → output messages.

* :func:`add_candidates` fills ``PlannedTrajectory.candidates`` (``PlanCandidate``: row, temperature, points in
  the trajectory's frame, valid, reason, score, raw text); ``chosen_candidate`` is set by ``plan_trajectory``;
* :func:`candidate_markers`: ns ``wam_diff2/candidates``, id = the candidate's row, one faint LINE_STRIP from the
  ego through each candidate that is not the published plan (valid ones faint green, rejected ones fainter red),
  DELETE for the ids of rows not drawn, up to ``planning.candidates``, so nothing lingers.
"""

from __future__ import annotations

from typing import Any

from geometry_msgs.msg import Point
from visualization_msgs.msg import Marker, MarkerArray

from wam_diff2_ros.core.frames import EgoPose, transform_waypoints
from wam_diff2_ros.core.planning import PlanResult

from .outputs import _color, _delete, _marker, _unit, trajectory_points

CANDIDATES_NS = "wam_diff2/candidates"
CANDIDATE_COLORS = {True: (0.3, 0.85, 0.45, 0.35), False: (0.95, 0.25, 0.2, 0.2)}  # by validity: faint
CANDIDATE_LINE_WIDTH_M = 0.12


def add_candidates(trajectory: Any, result: PlanResult, msgs: Any, pose: EgoPose | None = None) -> Any:
    """``trajectory`` (a ``PlannedTrajectory`` of ``result``) with every candidate of ``result``; with ``pose``
    their points are moved into its frame, like the trajectory's own."""
    z = pose.z if pose is not None else 0.0
    for candidate in result.candidates:
        item = msgs.PlanCandidate()
        item.index = min(max(int(candidate.index), 0), 255)
        item.temperature = float(candidate.temperature)
        placed = candidate.waypoints if pose is None else transform_waypoints(candidate.waypoints, pose)
        item.points = trajectory_points(candidate.waypoints, placed, z, msgs)
        item.valid = bool(candidate.valid)
        item.invalid_reason = candidate.reason
        item.score = _unit(candidate.score)
        item.raw_text = candidate.raw_text
        trajectory.candidates.append(item)
    return trajectory


def candidate_markers(
    result: PlanResult, frame_id: str, lifetime_s: float, max_candidates: int, pose: EgoPose | None = None
) -> MarkerArray:
    """Faint line strips for the candidates that were not published (see the module docstring)."""
    markers = MarkerArray()
    stamp = result.stamp_ns
    frame = pose.frame_id if pose is not None else frame_id
    z = pose.z if pose is not None else 0.0
    origin = (pose.x, pose.y) if pose is not None else (0.0, 0.0)
    drawn = set()
    for candidate in result.candidates:
        if (candidate.index == result.chosen_candidate and result.valid) or not candidate.waypoints:
            continue
        placed = candidate.waypoints if pose is None else transform_waypoints(candidate.waypoints, pose)
        line = _marker(CANDIDATES_NS, candidate.index, frame, stamp, lifetime_s)
        line.type = Marker.LINE_STRIP
        line.action = Marker.ADD
        line.scale.x = CANDIDATE_LINE_WIDTH_M
        line.color = _color(*CANDIDATE_COLORS[bool(candidate.valid)])
        line.points = [Point(x=origin[0], y=origin[1], z=z)] + [Point(x=w.x, y=w.y, z=z) for w in placed]
        markers.markers.append(line)
        drawn.add(candidate.index)
    markers.markers.extend(
        _delete(CANDIDATES_NS, index, frame, stamp) for index in range(max_candidates) if index not in drawn
    )
    return markers
