"""Is the decoder's confidence worth anything? Figures re-computed from ``predictions.jsonl`` and the ego track.

Every planned record carries, per waypoint, the winning probabilities of the tokens that wrote its numbers
(``waypoint_token_probabilities``) and the least confident token of the whole answer (``answer_confidence``).
:func:`confidence_analysis` joins them with each waypoint's L2 error against the ego's actual future and
reports, for every way of turning token probabilities into a waypoint confidence
(:data:`wam_diff2_ros.core.confidence.AGGREGATES`):

- the Spearman rank correlation between waypoint confidence and waypoint error (over all waypoints, and the
  mean of the correlations within each waypoint time, which removes the effect that both change with the
  horizon; a useful confidence has a clearly negative value);
- a reliability table: waypoints in confidence deciles, mean confidence and mean error per decile;
- plans above vs below thresholds (the quartiles of the answers' confidence): valid rate and ADE;
- whether confidence tells valid plans from rejected ones: the AUC of the plan's confidence (valid vs rejected
  plans whose answer still reads as waypoints; they keep their waypoints and confidence in the records) and of
  the answer's least confident token (valid vs every rejected answer).

:func:`decoding_summary` gives the per-run figures the replay's metrics carry (confidence, deadline met,
steps per block, early tokens).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wam_diff2_ros.core.confidence import (
    AGGREGATES,
    WAYPOINT_AGGREGATE,
    plan_confidence,
    separation_auc,
    spearman,
    waypoint_confidence,
)
from wam_diff2_ros.replay.evaluation import compute_metrics, to_jsonable


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """The planned records of a ``predictions.jsonl``."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [r for r in records if r.get("status") == "planned"]


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def decoding_summary(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per run: plans, the deadline(s), how often it was met, steps per block, early tokens, confidence."""
    planned = [r for r in records if r.get("status", "planned") == "planned"]
    valid = [r for r in planned if r.get("valid")]
    steps = [s for r in planned for s in r.get("steps_per_block") or []]
    deadlines = sorted({float(r.get("deadline_ms") or 0.0) for r in planned})
    return to_jsonable(
        {
            "plans": len(planned),
            "deadline_ms": deadlines,
            "deadline_met_rate": _mean([float(bool(r.get("deadline_met", True))) for r in planned]),
            "mean_steps_per_block": _mean(steps),
            "mean_blocks": _mean([len(r.get("steps_per_block") or []) for r in planned]),
            "mean_early_tokens": _mean([float(r.get("early_tokens") or 0) for r in planned]),
            "mean_confidence": _mean([float(r["confidence"]) for r in valid if r.get("waypoint_confidence")]),
            "median_total_ms": float(np.median([r["timing"]["total_ms"] for r in planned])) if planned else None,
        }
    )


def _waypoint_pairs(records: Sequence[Mapping[str, Any]], track: Any, aggregate: str) -> list[tuple[int, float, float]]:
    """(waypoint index, confidence, error) for every valid waypoint with ground truth and token probabilities."""
    rows = [{"stamp_ns": r["stamp_ns"], "valid": r["valid"], "waypoints": r["waypoints"]} for r in records]
    instants = compute_metrics(rows, track, include_instants=True)["instants"]
    combine = AGGREGATES[aggregate]
    pairs = []
    for record, instant in zip(records, instants, strict=True):
        tokens = record.get("waypoint_token_probabilities") or []
        errors = instant.get("errors_m") or []
        for index, (probabilities, error) in enumerate(zip(tokens, errors, strict=False)):
            if probabilities and error is not None and math.isfinite(error):
                pairs.append((index, float(combine(probabilities)), float(error)))
    return pairs


def _deciles(pairs: Sequence[tuple[int, float, float]]) -> list[dict[str, Any]]:
    if not pairs:
        return []
    ordered = sorted(pairs, key=lambda p: p[1])
    chunks = np.array_split(np.arange(len(ordered)), min(10, len(ordered)))
    return [
        {
            "count": len(chunk),
            "mean_confidence": _mean([ordered[i][1] for i in chunk]),
            "mean_error_m": _mean([ordered[i][2] for i in chunk]),
        }
        for chunk in chunks
        if len(chunk)
    ]


def _thresholds(records: Sequence[Mapping[str, Any]], track: Any) -> list[dict[str, Any]]:
    """Plans split at the quartiles of the answer confidence: valid rate and ADE (4 s) above vs below."""
    scored = [r for r in records if r.get("answer_confidence") is not None]
    if not scored:
        return []
    rows = [{"stamp_ns": r["stamp_ns"], "valid": r["valid"], "waypoints": r["waypoints"]} for r in scored]
    instants = compute_metrics(rows, track, include_instants=True)["instants"]
    confidence = np.array([float(r["answer_confidence"]) for r in scored])
    result = []
    for quantile in (25, 50, 75):
        threshold = float(np.percentile(confidence, quantile))
        entry: dict[str, Any] = {"quantile": quantile, "threshold": threshold}
        for side, keep in (("above", confidence >= threshold), ("below", confidence < threshold)):
            chosen = [instant for instant, k in zip(instants, keep, strict=True) if k]
            ade = [i["ade_4s"] for i in chosen if i.get("ade_4s") is not None]
            entry[side] = {
                "plans": len(chosen),
                "valid_rate": _mean([float(i["valid"]) for i in chosen]),
                "ade_4s": _mean(ade),
            }
        result.append(entry)
    return result


def confidence_analysis(records: Sequence[Mapping[str, Any]], track: Any) -> dict[str, Any]:
    """The figures of the module docstring for planned ``records`` against ``track`` (an ``EgoTrack``)."""
    plans = [r for r in records if r.get("valid") and r.get("waypoint_token_probabilities")]
    plan_rows = [{"stamp_ns": r["stamp_ns"], "valid": True, "waypoints": r["waypoints"]} for r in plans]
    plan_ade = [i.get("ade_4s") for i in compute_metrics(plan_rows, track, include_instants=True)["instants"]]

    def plan_spearman(aggregate: str) -> float | None:
        scores = [plan_confidence([AGGREGATES[aggregate](t) for t in r["waypoint_token_probabilities"]]) for r in plans]
        known = [(s, a) for s, a in zip(scores, plan_ade, strict=True) if a is not None]
        return spearman([k[0] for k in known], [k[1] for k in known])

    rejected = [r for r in records if not r.get("valid") and r.get("waypoint_token_probabilities")]

    def plan_auc(aggregate: str) -> float | None:
        """Does the plan's confidence tell valid plans from rejected ones (that still read as waypoints)?"""
        scores = [
            [plan_confidence(waypoint_confidence(r["waypoint_token_probabilities"], aggregate)) for r in group]
            for group in (plans, rejected)
        ]
        return separation_auc(*scores)

    answered = [r for r in records if r.get("answer_confidence") is not None]
    by_aggregate: dict[str, Any] = {}
    for aggregate in AGGREGATES:
        pairs = _waypoint_pairs(records, track, aggregate)
        within = [
            spearman([p[1] for p in pairs if p[0] == k], [p[2] for p in pairs if p[0] == k])
            for k in sorted({p[0] for p in pairs})
        ]
        within = [w for w in within if w is not None]
        by_aggregate[aggregate] = {
            "waypoints": len(pairs),
            "spearman": spearman([p[1] for p in pairs], [p[2] for p in pairs]),
            "spearman_within_horizon": _mean(within),
            "reliability": _deciles(pairs),
            "plan_spearman_vs_ade_4s": plan_spearman(aggregate),  # the plan's confidence: min over its waypoints
            "plan_auc_valid_vs_rejected": plan_auc(aggregate),
        }
    return to_jsonable(
        {
            "plans": len(records),
            "waypoint": by_aggregate,
            "plan_spearman_confidence_vs_ade_4s": by_aggregate[WAYPOINT_AGGREGATE]["plan_spearman_vs_ade_4s"],
            # AUC of the plan's confidence for valid (positive) vs rejected plans whose answer reads as waypoints,
            # and of the answer's least confident token for valid vs every rejected answer; 0.5 = no separation
            "plan_auc_valid_vs_rejected": by_aggregate[WAYPOINT_AGGREGATE]["plan_auc_valid_vs_rejected"],
            "answer_auc_valid_vs_rejected": separation_auc(
                [float(r["answer_confidence"]) for r in answered if r.get("valid")],
                [float(r["answer_confidence"]) for r in answered if not r.get("valid")],
            ),
            "valid_plans_scored": len(plans),
            "rejected_plans_scored": len(rejected),
            "thresholds": _thresholds(records, track),
        }
    )
