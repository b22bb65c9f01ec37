"""The fleet report: every bag's metrics and the pooled ones, recomputed from each bag's ``predictions.jsonl`` and
odometry with :func:`wam_diff2_ros.replay.evaluation.compute_metrics` (:func:`build_report`), written as
``fleet_report.json``, ``fleet_report.md`` and pooled plots (:func:`write_report`).

Pooled metrics are over instants, not a mean of bag means: a bag with more plans weighs more.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wam_diff2_ros.core.markup import plot_text, write_page
from wam_diff2_ros.fleet.results import DONE, ODOMETRY_NAME, BagRecord, bags_root, write_json
from wam_diff2_ros.replay import evaluation
from wam_diff2_ros.replay.candidates import candidate_pairs, candidate_summary
from wam_diff2_ros.replay.state import NoTrack

LABELS = ("1s", "2s", "3s", "4s")
#: Speed bands (m/s, lower bound included) for the pooled metrics by ego speed at plan time.
SPEED_BANDS_MPS: tuple[tuple[float, float], ...] = ((0.0, 3.0), (3.0, 6.0), (6.0, 10.0), (10.0, 15.0), (15.0, math.inf))
WORST_COUNT = 10
REPORT_JSON = "fleet_report.json"
REPORT_MD = "fleet_report.md"
_BAG_SHIFT = 64  # pooled instants are keyed (bag index << 64) | stamp: every bag keeps its own clock


@dataclass
class BagData:
    """One replayed bag's plans (as the replay's metrics take them) and its ground-truth track."""

    record: BagRecord
    predictions: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    track: evaluation.EgoTrack | None


class PooledTrack:
    """The bags' tracks behind one :meth:`future_in_ego_frame`, for instants keyed by :func:`pooled_stamp`."""

    def __init__(self, tracks: Sequence[evaluation.EgoTrack | None]) -> None:
        self.tracks = list(tracks)

    def future_in_ego_frame(self, t_ns: int, horizons_s: Sequence[float] = evaluation.HORIZONS_S) -> Any:
        index, stamp = divmod(int(t_ns), 1 << _BAG_SHIFT)
        track = self.tracks[index]
        return None if track is None else track.future_in_ego_frame(stamp, horizons_s)


def pooled_stamp(index: int, stamp_ns: int) -> int:
    return (index << _BAG_SHIFT) | int(stamp_ns)


def load_bag(out: Path, record: BagRecord) -> BagData:
    """A committed bag's predictions and track (no track when its odometry was absent or unusable)."""
    from wam_diff2_ros.core.planning import PlanningConfig
    from wam_diff2_ros.replay.report import plan_records_for_metrics

    folder = bags_root(out) / record.name
    text = (folder / "predictions.jsonl").read_text(encoding="utf-8")
    predictions = [json.loads(line) for line in text.splitlines() if line.strip()]
    track = None
    odometry = json.loads((folder / ODOMETRY_NAME).read_text(encoding="utf-8"))
    if odometry:
        try:
            track = evaluation.EgoTrack.from_odometry([tuple(row) for row in odometry])
        except ValueError:
            track = None
    planned = [r for r in predictions if r["status"] == "planned"]
    planning = PlanningConfig()  # waypoint count and spacing: only rejected plans' drawings read them
    metric_rows = plan_records_for_metrics(planned, planning.num_waypoints, planning.waypoint_dt_s)
    rows = [{**row, "reason": r.get("reason")} for row, r in zip(metric_rows, planned, strict=True)]
    return BagData(record, predictions, rows, track)


def _key_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    invalid = metrics.get("invalid_rate")
    latency = metrics.get("latency_ms") or {}
    summary = {
        "plans": metrics.get("num_instants", 0),
        "valid": metrics.get("num_valid", 0),
        "valid_rate": None if invalid is None else 1.0 - invalid,
        **{f"{kind}_{h}": metrics.get(f"{kind}_{h}") for h in LABELS for kind in ("ade", "fde")},
        **{f"count_{h}": metrics.get(f"count_{h}", 0) for h in LABELS},
        "latency_ms_p50": latency.get("p50"),
        "latency_ms_p95": latency.get("p95"),
    }
    return summary


def _longest(values: Mapping[str, Any], kind: str) -> tuple[int, float]:
    """(horizon rank, value) of the longest horizon that has ``kind`` (ade/fde): for ranking worst first."""
    for rank, label in zip((4, 3, 2, 1), reversed(LABELS), strict=True):
        value = values.get(f"{kind}_{label}")
        if value is not None:
            return rank, float(value)
    return 0, -1.0


def _speed_band(speed: float | None) -> str | None:
    if speed is None:
        return None
    for low, high in SPEED_BANDS_MPS:
        if low <= speed < high:
            return f"{low:g}-{high:g} m/s" if math.isfinite(high) else f">= {low:g} m/s"
    return None


def build_report(out: Path, records: Sequence[BagRecord], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The fleet report (JSON-ready) for the bags in ``records``, in that order."""
    bags: list[dict[str, Any]] = []
    data: list[BagData] = []
    worst_plans: list[dict[str, Any]] = []
    invalid_plans: list[dict[str, Any]] = []
    candidate_plans: list[Any] = []  # (record, instant) of every bag, for the pooled candidate figures
    for record in records:
        entry: dict[str, Any] = {
            "name": record.name,
            "bag": record.bag,
            "status": record.status,
            "exit_code": record.exit_code,
            "reason": record.reason,
            "attempts": record.attempts,
            "wall_s": record.wall_s,
            "folder": f"bags/{record.name}",
        }
        bags.append(entry)
        if record.status != DONE:
            continue
        try:
            bag = load_bag(out, record)
        except (OSError, ValueError) as exc:
            entry.update(status="failed", reason=f"its result cannot be read: {exc}")
            continue
        data.append(bag)
        metrics = evaluation.compute_metrics(
            bag.rows, bag.track if bag.track is not None else NoTrack(), include_instants=True
        )
        entry.update(
            _key_metrics(metrics),
            planning_instants=len(bag.predictions),
            blocked=sum(1 for r in bag.predictions if r["status"] == "blocked"),
            ground_truth=bag.track is not None,
            links=_links(out, record.name),
        )
        pairs = candidate_pairs(bag.predictions, metrics.get("instants", []))
        entry["candidates"] = candidate_summary(pairs)
        candidate_plans.extend(pairs)
        by_stamp = {r["stamp_ns"]: r for r in bag.predictions if r["status"] == "planned"}
        for instant in metrics.get("instants", []):
            source = by_stamp.get(instant["stamp_ns"], {})
            plan = {
                "bag": record.name,
                "t_s": source.get("t_s"),
                "stamp_ns": instant["stamp_ns"],
                "command": source.get("command"),
                "speed_mps": math.hypot(*source["velocity"]) if source.get("velocity") else None,
            }
            if not instant["valid"]:
                invalid_plans.append({**plan, "reason": source.get("reason") or instant.get("invalid_reason")})
            elif _longest(instant, "fde")[0]:
                worst_plans.append({**plan, **{k: v for k, v in instant.items() if k[:4] in ("ade_", "fde_")}})
    pooled_rows = [
        {**row, "stamp_ns": pooled_stamp(index, row["stamp_ns"])} for index, bag in enumerate(data) for row in bag.rows
    ]
    track = PooledTrack([bag.track for bag in data])
    pooled = evaluation.compute_metrics(pooled_rows, track)
    by_speed = {}
    for low, _high in SPEED_BANDS_MPS:
        label = _speed_band(low)
        subset = [row for row in pooled_rows if _speed_band(row.get("speed")) == label]
        if subset:
            by_speed[label] = _key_metrics(evaluation.compute_metrics(subset, track))
    replayed = [b for b in bags if b["status"] == DONE]
    worst_plans.sort(key=lambda p: _longest(p, "fde"), reverse=True)
    return evaluation.to_jsonable(
        {
            "settings": dict(settings),
            "bags_total": len(bags),
            "bags_done": len(replayed),
            "bags_failed": len(bags) - len(replayed),
            "pooled": {
                **_key_metrics(pooled),
                "planning_instants": sum(b.get("planning_instants", 0) for b in replayed),
                "blocked": sum(b.get("blocked", 0) for b in replayed),
                "invalid_reasons": pooled["invalid_reasons"],
                "latency_ms": pooled["latency_ms"],
                "error_curve": pooled["error_curve"],
                "by_command": {
                    name: {k: v for k, v in group.items() if k != "error_curve"}
                    for name, group in pooled["by_command"].items()
                },
                "by_speed": by_speed,
                "candidates": candidate_summary(candidate_plans),
            },
            "bags": bags,
            "worst_bags": sorted(
                (b for b in replayed if _longest(b, "ade")[0]), key=lambda b: _longest(b, "ade"), reverse=True
            )[:WORST_COUNT],
            "least_valid_bags": sorted(
                (b for b in replayed if b.get("valid_rate") is not None and b["valid_rate"] < 1.0),
                key=lambda b: b["valid_rate"],
            )[:WORST_COUNT],
            "worst_plans": worst_plans[:WORST_COUNT],
            "invalid_plans": invalid_plans[:WORST_COUNT],
            "failures": [{"name": b["name"], "reason": b["reason"]} for b in bags if b["status"] != DONE],
            "_pooled_metrics": pooled,
        }
    )


def _links(out: Path, name: str) -> dict[str, str]:
    folder = bags_root(out) / name
    wanted = ("report.html", "summary.txt", "metrics.json", "predictions.jsonl", "plots/bev.png")
    return {item: f"bags/{name}/{item}" for item in wanted if (folder / item).exists()}


def write_report(out: Path, report: dict[str, Any]) -> list[Path]:
    """``fleet_report.json``, ``fleet_report.md`` and the pooled plots in ``out``; returns the paths written."""
    from wam_diff2_ros.fleet.report_text import markdown

    pooled = report.pop("_pooled_metrics")
    plots = _plots(out, report, pooled)
    report["plots"] = [str(p.relative_to(out)) for p in plots]
    write_json(out / REPORT_JSON, report)
    write_page(out / REPORT_MD, markdown(report))
    return [out / REPORT_JSON, out / REPORT_MD, *plots]


def _plots(out: Path, report: Mapping[str, Any], pooled: Mapping[str, Any]) -> list[Path]:
    from wam_diff2_ros.replay import plots as plotting

    written = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if pooled.get("num_valid"):
            written.append(
                plotting.plot_error_over_horizon(
                    pooled, out / "plots" / "error_over_horizon.png", title="Fleet: error over the horizon, pooled"
                )
            )
        bars = [b for b in report["bags"] if b["status"] == DONE]
        if bars:
            written.append(_plot_bags(bars, out / "plots" / "bags.png"))
    return written


def _plot_bags(bags: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Per bag: ADE and FDE at the longest horizon it has, and its valid rate."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 0.6 * len(bags) + 2.0), 5.0), dpi=100)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    names = [plot_text(b["name"], 40) for b in bags]
    x = list(range(len(bags)))
    for offset, kind, color in ((-0.2, "ade", "tab:blue"), (0.2, "fde", "tab:orange")):
        values = [b.get(f"{kind}_4s") for b in bags]
        top.bar([i + offset for i in x], [v or 0.0 for v in values], width=0.4, color=color, label=f"{kind.upper()}@4s")
    top.set_ylabel("error [m]")
    top.legend(fontsize=8)
    top.grid(True, axis="y", lw=0.4, alpha=0.6)
    bottom.bar(x, [100.0 * (b.get("valid_rate") or 0.0) for b in bags], color="tab:green")
    bottom.set_ylabel("valid plans [%]")
    bottom.set_ylim(0, 105)
    bottom.set_xticks(x, names, rotation=45, ha="right", fontsize=8)
    fig.suptitle("Fleet: per bag (4 s horizon; bars at 0 where the bag has no 4 s ground truth)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
