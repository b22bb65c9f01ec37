"""Offline evaluation of waypoint plans against the ego's actual future (from odometry).

A plan made at stamp ``t`` lists waypoints at ``t + 0.5 s, …, t + 4.0 s`` in the ego frame at
``t`` (``base_link``: x forward, y left, metres; the NAVSIM rear-axle frame). The ground truth is
the odometry track (``odom`` -> ``base_link`` poses) interpolated at those times and expressed
in the same frame (:meth:`EgoTrack.future_in_ego_frame`).

Metrics (:func:`compute_metrics`), per horizon T in 1, 2, 3, 4 s: ``ade_Ts`` = mean over
instants of the mean L2 error of the waypoints with t ≤ T, ``fde_Ts`` = mean L2 error at t = T.
An instant counts for horizon T when its plan is valid and the track covers t + T; instants
whose future runs past the end of the track count for the shorter horizons only. Also the
invalid-plan rate, latency percentiles and the mean error per waypoint time. The dicts are
JSON-ready: NaN never appears, missing values are ``None`` (``null``).

Plots: :mod:`wam_diff2_ros.replay.plots`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wam_diff2_ros.core.kinematics import breach_size, rule_of
from wam_diff2_ros.core.samples import problem_kind
from wam_diff2_ros.core.units import NS_PER_S
from wam_diff2_ros.ros.conversions import odometry_track_point

HORIZONS_S: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)
METRIC_HORIZONS_S: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0)
_TIME_TOL_S = 1e-6


def _odometry_sample(sample: Any, index: int) -> tuple[int, float, float, float]:
    if hasattr(sample, "msg") and hasattr(sample.msg, "pose"):  # a bag.BagMessage
        sample = sample.msg
    if hasattr(sample, "header") and hasattr(sample, "pose"):
        return odometry_track_point(sample)
    try:
        stamp, x, y, yaw = sample
        return int(stamp), float(x), float(y), float(yaw)
    except (TypeError, ValueError):
        raise ValueError(
            f"odometry sample {index} is neither a nav_msgs/Odometry nor (stamp_ns, x, y, yaw): {sample!r:.80}"
        ) from None


@dataclass(frozen=True)
class EgoTrack:
    """Time-stamped rear-axle poses in the odometry frame, interpolated linearly.

    ``yaw`` is unwrapped, so interpolating it takes the shortest way between samples. Samples
    further apart than ``max_gap_s`` are not interpolated across (no pose there).
    """

    stamps_ns: np.ndarray
    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    max_gap_s: float = 0.5

    @classmethod
    def from_odometry(cls, samples: Iterable[Any], *, max_gap_s: float = 0.5) -> EgoTrack:
        """From ``nav_msgs/Odometry`` messages (or bag messages holding them) or ``(stamp_ns, x, y,
        yaw)`` tuples, in any order. The header stamp is the sample time."""
        rows = [_odometry_sample(s, i) for i, s in enumerate(samples)]
        if len(rows) < 2:
            raise ValueError(f"an ego track needs at least 2 odometry samples, got {len(rows)}")
        data = np.array([r[1:] for r in rows], float)
        bad = np.flatnonzero(~np.isfinite(data).all(axis=1))
        if bad.size:
            raise ValueError(f"odometry sample {int(bad[0])} has a non-finite pose: {rows[int(bad[0])]}")
        stamps = np.array([r[0] for r in rows], np.int64)
        order = np.argsort(stamps, kind="stable")
        stamps, data = stamps[order], data[order]
        keep = np.concatenate([[True], np.diff(stamps) > 0])  # first sample of each stamp
        stamps, data = stamps[keep], data[keep]
        if len(stamps) < 2:
            raise ValueError("an ego track needs at least 2 distinct odometry stamps")
        return cls(stamps, data[:, 0], data[:, 1], np.unwrap(data[:, 2]), float(max_gap_s))

    @property
    def start_ns(self) -> int:
        return int(self.stamps_ns[0])

    @property
    def end_ns(self) -> int:
        return int(self.stamps_ns[-1])

    def pose_at(self, t_ns: int) -> tuple[float, float, float] | None:
        """Interpolated ``(x, y, yaw)`` at ``t_ns``; None outside the track or inside a gap."""
        stamps = self.stamps_ns
        t_ns = int(t_ns)
        if t_ns < stamps[0] or t_ns > stamps[-1]:
            return None
        i = int(np.searchsorted(stamps, t_ns, side="right")) - 1
        if i >= len(stamps) - 1:
            return float(self.x[-1]), float(self.y[-1]), _wrap(float(self.yaw[-1]))
        t0, t1 = int(stamps[i]), int(stamps[i + 1])
        if t_ns != t0 and (t1 - t0) / NS_PER_S > self.max_gap_s:
            return None
        f = (t_ns - t0) / (t1 - t0)
        x = self.x[i] + f * (self.x[i + 1] - self.x[i])
        y = self.y[i] + f * (self.y[i + 1] - self.y[i])
        yaw = self.yaw[i] + f * (self.yaw[i + 1] - self.yaw[i])
        return float(x), float(y), _wrap(float(yaw))

    def future_in_ego_frame(self, t_ns: int, horizons_s: Sequence[float] = HORIZONS_S) -> np.ndarray | None:
        """Actual positions at ``t_ns + h`` in the ego frame at ``t_ns`` (x forward, y left).

        Shape ``(len(horizons_s), 2)``; rows are NaN where the track has no pose (it ended
        first, or a gap). None when there is no pose at ``t_ns`` itself.
        """
        origin = self.pose_at(t_ns)
        if origin is None:
            return None
        x0, y0, yaw0 = origin
        c, s = math.cos(yaw0), math.sin(yaw0)
        out = np.full((len(horizons_s), 2), np.nan)
        for k, h in enumerate(horizons_s):
            pose = self.pose_at(int(t_ns) + round(float(h) * NS_PER_S))
            if pose is not None:
                dx, dy = pose[0] - x0, pose[1] - y0
                out[k] = (c * dx + s * dy, -s * dx + c * dy)
        return out

    def speed_at(self, t_ns: int, window_s: float = 0.1) -> float | None:
        """Speed (m/s) from the positions ``window_s`` either side of ``t_ns`` (clipped to the track)."""
        half = round(window_s * NS_PER_S)
        a = max(int(t_ns) - half, self.start_ns)
        b = min(int(t_ns) + half, self.end_ns)
        pa, pb = self.pose_at(a), self.pose_at(b)
        if pa is None or pb is None or b <= a:
            return None
        return math.hypot(pb[0] - pa[0], pb[1] - pa[1]) / ((b - a) / NS_PER_S)


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


# --------------------------------------------------------------------------------------------
# Plans


@dataclass(frozen=True)
class PlanRecord:
    """One planning instant: the plan's stamp, whether it is valid, its waypoints (N x 2, ego
    frame at the stamp), and optionally latency (s), command text, ego speed (m/s), why it is invalid and,
    for an answer the kinematic gate rejected, the waypoints it rejected (``rejected``, N x 2)."""

    stamp_ns: int
    valid: bool
    waypoints: np.ndarray | None
    latency_s: float | None = None
    command: str | None = None
    speed: float | None = None
    reason: str | None = None
    rejected: np.ndarray | None = None

    @staticmethod
    def coerce(item: PlanRecord | Mapping[str, Any]) -> PlanRecord:
        """A :class:`PlanRecord` from itself or a mapping with the same keys."""
        if isinstance(item, PlanRecord):
            return item
        if not isinstance(item, Mapping) or "stamp_ns" not in item:
            raise ValueError(f"a prediction needs at least 'stamp_ns' (and 'valid', 'waypoints'): {item!r:.80}")
        waypoints = item.get("waypoints")
        rejected = item.get("rejected")
        return PlanRecord(
            stamp_ns=int(item["stamp_ns"]),
            valid=bool(item.get("valid", waypoints is not None)),
            waypoints=None if waypoints is None else np.asarray(waypoints, float),
            latency_s=None if item.get("latency_s") is None else float(item["latency_s"]),
            command=item.get("command"),
            speed=None if item.get("speed") is None else float(item["speed"]),
            reason=item.get("reason") or None,
            rejected=None if rejected is None else np.asarray(rejected, float),
        )


def usable_waypoints(plan: PlanRecord, count: int) -> tuple[np.ndarray | None, str | None]:
    """The plan's waypoints if it is valid and well formed, else None and the reason."""
    if not plan.valid:  # counted by the kind of reason (numbers removed), e.g. the kinematic rule that failed
        return None, problem_kind(plan.reason) if plan.reason else "plan marked invalid"
    if plan.waypoints is None:
        return None, "no waypoints"
    wp = np.asarray(plan.waypoints, float)
    if wp.shape != (count, 2):
        return None, f"waypoints shape {wp.shape} != ({count}, 2)"
    if not np.isfinite(wp).all():
        return None, "non-finite waypoint"
    return wp, None


def invalid_by_rule(reasons: Iterable[str | None]) -> dict[str, dict[str, Any]]:
    """Reasons of invalid plans grouped by the rule they broke (a kinematic rule's name, else the reason's kind
    with its numbers replaced), most frequent first: ``{group: {"count": n, "worst": reason}}``. ``worst`` is the
    reason, figures kept, of the largest breach (:func:`~wam_diff2_ros.core.kinematics.breach_size`), or the
    first one seen when the reasons carry no figure."""
    groups: dict[str, dict[str, Any]] = {}
    for reason in reasons:
        text = reason or "plan marked invalid"
        rule = rule_of(text)
        key = rule if rule is not None else problem_kind(text)
        size = breach_size(text)
        group = groups.setdefault(key, {"count": 0, "worst": text, "_size": size})
        group["count"] += 1
        if size is not None and (group["_size"] is None or size > group["_size"]):
            group.update(worst=text, _size=size)
    ordered = sorted(groups.items(), key=lambda item: -item[1]["count"])
    return {key: {"count": g["count"], "worst": g["worst"]} for key, g in ordered}


# --------------------------------------------------------------------------------------------
# Metrics


def _label(horizon: float) -> str:
    return f"{horizon:g}s"


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def compute_metrics(
    predictions: Iterable[PlanRecord | Mapping[str, Any]],
    track: EgoTrack,
    *,
    horizons_s: Sequence[float] = HORIZONS_S,
    metric_horizons_s: Sequence[float] = METRIC_HORIZONS_S,
    include_instants: bool = False,
) -> dict[str, Any]:
    """ADE/FDE per horizon, invalid rate, latency and the error per waypoint time (JSON-ready).

    ``predictions``: :class:`PlanRecord` or mappings (``stamp_ns``, ``valid``, ``waypoints``,
    optional ``latency_s``, ``command``, ``speed``). Waypoint k is at ``horizons_s[k]``.
    """
    horizons = [float(h) for h in horizons_s]
    index_of = {}
    for horizon in metric_horizons_s:
        matches = [k for k, h in enumerate(horizons) if abs(h - float(horizon)) < _TIME_TOL_S]
        if not matches:
            raise ValueError(f"metric horizon {horizon} s is not one of the waypoint times {horizons}")
        index_of[float(horizon)] = matches[0]
    plans = [PlanRecord.coerce(p) for p in predictions]
    invalid_reasons: Counter[str] = Counter()
    latencies = [p.latency_s * 1000.0 for p in plans if p.latency_s is not None and math.isfinite(p.latency_s)]
    per_step: list[list[float]] = [[] for _ in horizons]
    ade: dict[float, list[float]] = {h: [] for h in index_of}
    fde: dict[float, list[float]] = {h: [] for h in index_of}
    by_command: dict[str, dict[str, Any]] = {}
    instants = []
    no_ground_truth = 0
    for plan in plans:
        waypoints, reason = usable_waypoints(plan, len(horizons))
        record: dict[str, Any] = {"stamp_ns": plan.stamp_ns, "valid": waypoints is not None}
        if waypoints is None:
            invalid_reasons[reason or "invalid"] += 1
            record["invalid_reason"] = reason
            instants.append(record)
            continue
        truth = track.future_in_ego_frame(plan.stamp_ns, horizons)
        if truth is None:
            no_ground_truth += 1
            record["ground_truth"] = False
            instants.append(record)
            continue
        errors = np.linalg.norm(waypoints - truth, axis=1)  # NaN where the truth is missing
        for k, err in enumerate(errors):
            if math.isfinite(err):
                per_step[k].append(float(err))
        group = by_command.setdefault(
            plan.command or "unknown",
            {
                "count": 0,
                "steps": [[] for _ in horizons],
                "ade": {h: [] for h in index_of},
                "fde": {h: [] for h in index_of},
            },
        )
        group["count"] += 1
        for k, err in enumerate(errors):
            if math.isfinite(err):
                group["steps"][k].append(float(err))
        for horizon, k in index_of.items():
            upto = errors[: k + 1]
            if np.isfinite(upto).all():
                for target in (ade[horizon], group["ade"][horizon]):
                    target.append(float(upto.mean()))
                for target in (fde[horizon], group["fde"][horizon]):
                    target.append(float(errors[k]))
                record[f"ade_{_label(horizon)}"] = float(upto.mean())
                record[f"fde_{_label(horizon)}"] = float(errors[k])
        record["errors_m"] = [float(e) if math.isfinite(e) else None for e in errors]
        instants.append(record)

    num = len(plans)
    invalid = sum(invalid_reasons.values())
    metrics: dict[str, Any] = {
        "num_instants": num,
        "num_valid": num - invalid,
        "num_invalid": invalid,
        "invalid_rate": invalid / num if num else None,
        "invalid_reasons": dict(invalid_reasons),
        "num_without_ground_truth": no_ground_truth,
        "horizons_s": horizons,
    }
    for horizon in index_of:
        label = _label(horizon)
        metrics[f"ade_{label}"] = _mean(ade[horizon])
        metrics[f"fde_{label}"] = _mean(fde[horizon])
        metrics[f"count_{label}"] = len(ade[horizon])
    metrics["latency_ms"] = {
        "count": len(latencies),
        "mean": _mean(latencies),
        "p50": float(np.percentile(latencies, 50)) if latencies else None,
        "p95": float(np.percentile(latencies, 95)) if latencies else None,
        "max": float(np.max(latencies)) if latencies else None,
    }
    metrics["error_curve"] = [
        {"t": h, "mean_l2": _mean(values), "count": len(values)} for h, values in zip(horizons, per_step, strict=True)
    ]
    metrics["by_command"] = {
        command: {
            "count": group["count"],
            **{f"ade_{_label(h)}": _mean(group["ade"][h]) for h in index_of},
            **{f"fde_{_label(h)}": _mean(group["fde"][h]) for h in index_of},
            "error_curve": [
                {"t": h, "mean_l2": _mean(v), "count": len(v)} for h, v in zip(horizons, group["steps"], strict=True)
            ],
        }
        for command, group in sorted(by_command.items())
    }
    if include_instants:
        metrics["instants"] = instants
    return to_jsonable(metrics)


def to_jsonable(value: Any) -> Any:
    """Plain JSON types throughout: numpy scalars/arrays converted, NaN and ±inf -> None."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [to_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_metrics_json(metrics: Mapping[str, Any], path: str | Path) -> Path:
    """Write ``metrics`` as strict JSON (no NaN) to ``path``; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_jsonable(metrics), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path
