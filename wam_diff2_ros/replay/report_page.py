"""``report.html``: the replay as one self-contained page (:func:`write_report_page`).

The page holds its data as embedded JSON and draws everything client-side (no network fetches, no images per
plan): the summary metrics, the error over the horizon (SVG), a sortable, filterable, paginated table of every
planning instant (one row per ``predictions.jsonl`` line) and, for the row clicked, the predicted and the actual
path over a bird's-eye view (canvas); a rejected plan's waypoints are drawn dashed red. Waypoints are rounded to
centimetres; 5,000 plans stay a few MB. Every text on the page is escaped and shortened
(:mod:`wam_diff2_ros.core.markup`: the model's answer to :data:`RAW_TEXT_CHARS`, any other text to
``PAGE_TEXT_CHARS``; the full texts are in ``predictions.jsonl``); NaN and infinities are shown empty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from wam_diff2_ros.core.markup import embed_json, escape_text, fill_template, write_page

TEMPLATE = "report_page.html"
RAW_TEXT_CHARS = 400  # the model's answer shown per plan (the full text is in predictions.jsonl)


def _round(value: Any, digits: int = 2) -> float | None:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(float(value), digits)


def _points(points: Any) -> list[list[float] | None] | None:
    if points is None:
        return None
    out: list[list[float] | None] = []
    for point in points:
        x, y = (float(point[0]), float(point[1])) if point is not None else (math.nan, math.nan)
        out.append([round(x, 2), round(y, 2)] if math.isfinite(x) and math.isfinite(y) else None)
    return out


def _longest(instant: Mapping[str, Any], horizons_s: Sequence[float]) -> tuple[float | None, float | None, str]:
    """ADE / FDE at the longest horizon this plan has ground truth for."""
    for horizon in sorted(horizons_s, reverse=True):
        label = f"{horizon:g}s"
        if f"ade_{label}" in instant:
            return instant[f"ade_{label}"], instant[f"fde_{label}"], label
    return None, None, ""


def plan_rows(
    records: Sequence[Mapping[str, Any]],
    instants: Sequence[Mapping[str, Any]],
    track: Any,
    horizons_s: Sequence[float],
    metric_horizons_s: Sequence[float],
) -> list[dict[str, Any]]:
    """One row per record (``predictions.jsonl`` line): what the table shows and the frame draws."""
    by_stamp = {i["stamp_ns"]: i for i in instants}
    rows = []
    for record in records:
        planned = record["status"] == "planned"
        status = ("valid" if record["valid"] else "invalid") if planned else record["status"]
        instant = by_stamp.get(record.get("stamp_ns"), {}) if planned else {}
        ade, fde, horizon = _longest(instant, metric_horizons_s)
        actual = None
        if planned and track is not None:
            future = track.future_in_ego_frame(record["stamp_ns"], horizons_s)
            actual = _points(future) if future is not None else None
        velocity = record.get("velocity")
        timing = record.get("timing") or {}
        rows.append(
            {
                "instant": record["instant"],
                "t": _round(record["t_s"], 3),
                "command": record.get("command", ""),
                "speed": _round(math.hypot(*velocity)) if velocity else None,
                "status": status,
                "reason": record.get("reason", ""),
                "ade": _round(ade, 3),
                "fde": _round(fde, 3),
                "horizon": horizon,
                "confidence": _round(record.get("confidence"), 3),
                "latency": _round(timing.get("total_ms"), 1),
                "predicted": _points(record.get("waypoints")),
                "rejected": _points(record.get("rejected_waypoints")),
                "actual": actual,
                "raw_text": (record.get("raw_text") or "")[:RAW_TEXT_CHARS],
                "candidates": [
                    {
                        "index": c["index"],
                        "valid": c["valid"],
                        "score": _round(c["score"], 3),
                        "reason": c["reason"],
                        "points": _points(c["waypoints"]),
                    }
                    for c in record.get("candidates") or []
                ],
                "chosen": record.get("chosen_candidate"),
            }
        )
    return rows


def summary_items(metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs of the summary table."""
    run = metrics.get("run", {})

    def num(value: Any, unit: str = "", digits: int = 2) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}{unit}"

    latency = metrics.get("latency_ms", {})
    invalid = metrics.get("invalid_rate")
    items = [
        ("model", f"{run.get('model', '?')} ({run.get('device', '?')}, {run.get('dtype', '?')})"),
        ("decoding", str(run.get("decoding_engine", ""))),
        ("planning instants", str(metrics.get("planning_instants", 0))),
        (
            "planned",
            f"{metrics.get('num_instants', 0)} ({metrics.get('num_valid', 0)} valid, "
            f"{metrics.get('num_invalid', 0)} invalid{f' = {100 * invalid:.1f} %' if invalid is not None else ''})",
        ),
        ("blocked / engine errors", f"{metrics.get('num_blocked', 0)} / {metrics.get('num_engine_errors', 0)}"),
    ]
    for label in ("1s", "2s", "3s", "4s"):
        if f"ade_{label}" in metrics:
            items.append(
                (
                    f"ADE / FDE @{label}",
                    f"{num(metrics.get(f'ade_{label}'))} / {num(metrics.get(f'fde_{label}'))} m "
                    f"(n={metrics.get(f'count_{label}', 0)})",
                )
            )
    items.append(
        (
            "model latency",
            f"p50 {num(latency.get('p50'), ' ms', 0)}, p95 {num(latency.get('p95'), ' ms', 0)}, "
            f"max {num(latency.get('max'), ' ms', 0)}",
        )
    )
    picked = metrics.get("candidates") or {}
    if picked.get("candidates", 1) > 1:
        items.append(
            (
                "candidates",
                f"{picked['candidates']} per plan, {num(picked.get('mean_valid_candidates'))} valid on average; "
                f"score vs ADE 4 s Spearman {num(picked.get('score_spearman_vs_ade_4s'))} "
                f"(n={picked.get('scored_plans', 0)})",
            )
        )
    items.append(("params hash", str(run.get("params_hash", ""))))
    return items


def write_report_page(
    path: Path,
    metrics: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    instants: Sequence[Mapping[str, Any]],
    track: Any,
) -> Path:
    """Write ``report.html`` (see the module docstring) and return its path."""
    horizons = list(metrics.get("horizons_s") or [])
    metric_horizons = [h for h in (1.0, 2.0, 3.0, 4.0) if f"ade_{h:g}s" in metrics]
    run = metrics.get("run", {})
    data = {
        "summary": {
            "subtitle": f"bag {run.get('bag', '?')}",
            "items": summary_items(metrics),
            "notes": list(metrics.get("notes", [])),
        },
        "error_curve": list(metrics.get("error_curve", [])),
        "rows": plan_rows(records, instants, track, horizons, metric_horizons),
    }
    values = {
        "TITLE": escape_text(f"wam-diff2-replay: {run.get('model', '?')} on {Path(str(run.get('bag', '?'))).name}"),
        "DATA": embed_json(data),
    }
    template = resources.files("wam_diff2_ros.replay").joinpath(TEMPLATE).read_text(encoding="utf-8")
    return write_page(path, fill_template(template, values))
