"""What candidate plans (``planning.candidates``, core/candidates.py) were worth on a drive, from ``predictions.jsonl``.

:func:`candidate_summary` joins the planned records with their instants' errors (``compute_metrics``'s
``instants``: the chosen plan against the ego's actual future) and reports the valid-plan rate, ADE / FDE at 4 s
of the chosen plans, the Spearman rank correlation between the chosen plan's score (its confidence) and its
ADE at 4 s (a useful score is clearly negative), which rows were chosen, how many valid candidates a plan had,
and how often the greedy answer was rejected while a sampled one was published. The replay's ``metrics.json``
carries it as ``candidates``; the fleet report pools the same pairs over every bag.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from wam_diff2_ros.replay.confidence_analysis import spearman
from wam_diff2_ros.replay.evaluation import to_jsonable

Pair = tuple[Mapping[str, Any], Mapping[str, Any]]  # (planned record, its instant)


def candidate_pairs(records: Iterable[Mapping[str, Any]], instants: Iterable[Mapping[str, Any]]) -> list[Pair]:
    """Each planned record with the instant of the same stamp (records without an instant are left out)."""
    by_stamp = {instant["stamp_ns"]: instant for instant in instants}
    return [
        (record, by_stamp[record["stamp_ns"]])
        for record in records
        if record.get("status") == "planned" and record.get("stamp_ns") in by_stamp
    ]


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def candidate_summary(pairs: Sequence[Pair]) -> dict[str, Any]:
    """The figures of the module docstring over ``pairs`` (see :func:`candidate_pairs`)."""
    counts = [len(record.get("candidates") or []) or 1 for record, _ in pairs]
    scored = [
        (float(record["confidence"]), float(instant["ade_4s"]))
        for record, instant in pairs
        if record.get("valid") and instant.get("ade_4s") is not None and record.get("waypoint_confidence")
    ]
    batches = [record for record, _ in pairs if record.get("candidates")]
    rescued = sum(1 for r in batches if r.get("valid") and not r["candidates"][0]["valid"])
    return to_jsonable(
        {
            "plans": len(pairs),
            "candidates": max(counts) if counts else 1,
            "valid_rate": _mean([float(bool(record.get("valid"))) for record, _ in pairs]),
            "ade_4s": _mean([i["ade_4s"] for _, i in pairs if i.get("ade_4s") is not None]),
            "fde_4s": _mean([i["fde_4s"] for _, i in pairs if i.get("fde_4s") is not None]),
            "score_spearman_vs_ade_4s": spearman([s for s, _ in scored], [a for _, a in scored]),
            "scored_plans": len(scored),
            "chosen_rows": dict(
                sorted(Counter(str(r.get("chosen_candidate")) for r in batches if r.get("valid")).items())
            ),
            "mean_valid_candidates": _mean([float(sum(c["valid"] for c in r["candidates"])) for r in batches]),
            "greedy_rejected_sampled_published": rescued,
        }
    )
