"""Quality of a trained demo model on held-out samples, through the real engine; behaviour sweeps."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from wam_diff2_ros.core.confidence import (
    generation_waypoint_probabilities,
    plan_confidence,
    separation_auc,
    spearman,
    waypoint_confidence,
)
from wam_diff2_ros.core.engine.decoding import DecodeConfig
from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.core.prompts import build_planning_prompt
from wam_diff2_ros.demo.train.config import COMMANDS, MAX_SPEED, SPEED_BANDS
from wam_diff2_ros.demo.train.data import DrivingSample, ImagePool


def path_length(points: np.ndarray) -> float:
    """Length of the polyline origin -> waypoints."""
    pts = np.vstack([[0.0, 0.0], np.asarray(points, dtype=float).reshape(-1, 2)])
    return float(np.linalg.norm(np.diff(pts, axis=0), axis=1).sum())


def evaluate(
    engine: Any,
    samples: Sequence[DrivingSample],
    images: Sequence[np.ndarray],
    decode: DecodeConfig | None = None,
) -> dict[str, Any]:
    """Decode every sample with `engine` and measure validity, ADE/FDE, steps per block, latency, behaviour."""
    decode = decode or DecodeConfig()
    rows = []
    for sample in samples:
        result = engine.generate(sample.prompt, [images[sample.image_index]], decode)
        # "valid": the answer format (what the shipped metrics were measured as); "plausible": it also passes
        # the kinematic plausibility gate with the prompt's speed, as the node and the replay apply it.
        parsed = parse_waypoints(result.text, check_kinematics=False)
        plausible = parse_waypoints(result.text, current_speed_mps=sample.speed).valid
        row: dict[str, Any] = {
            "command": sample.command,
            "speed": sample.speed,
            "valid": parsed.valid,
            "plausible": plausible,
            "latency_s": result.timing.total_s,
            "steps": list(result.steps_per_block),
            "gt_length": path_length(np.asarray(sample.waypoints)),
            "gt_final_y": sample.waypoints[-1][1],
            "num_prompt_tokens": result.num_prompt_tokens,
            "image_size": "x".join(str(n) for n in images[sample.image_index].shape[1::-1]),
        }
        probabilities = generation_waypoint_probabilities(result, parsed) if parsed.valid else ()
        row["confidence"] = plan_confidence(waypoint_confidence(probabilities)) if probabilities else None
        if plausible:
            pred = np.array([[w.x, w.y] for w in parsed.waypoints])
            row["gate_ade"] = float(np.linalg.norm(pred - np.asarray(sample.waypoints), axis=1).mean())
        if parsed.valid:
            pred = np.array([[w.x, w.y] for w in parsed.waypoints])
            errors = np.linalg.norm(pred - np.asarray(sample.waypoints), axis=1)
            row.update(
                ade=float(errors.mean()), fde=float(errors[-1]), length=path_length(pred), final_y=float(pred[-1, 1])
            )
        rows.append(row)
    valid = [r for r in rows if r["valid"]]
    steps = [s for r in rows for s in r["steps"]]
    latencies = sorted(r["latency_s"] for r in rows)
    bins = [(0.0, 5.0), (5.0, 10.0), (10.0, 15.0), (15.0, 20.1)]
    length_by_speed = []
    for lo, hi in bins:
        members = [r for r in valid if lo <= r["speed"] < hi]
        length_by_speed.append(
            {
                "speed_m_s": [lo, min(hi, MAX_SPEED)],
                "count": len(members),
                "median_length_m": statistics.median([r["length"] for r in members]) if members else None,
                "median_gt_length_m": statistics.median([r["gt_length"] for r in members]) if members else None,
            }
        )
    final_y = {}
    for command in COMMANDS:
        members = [r for r in valid if r["command"] == command]
        final_y[command] = {
            "count": len(members),
            "mean_final_y_m": statistics.fmean([r["final_y"] for r in members]) if members else None,
            "mean_gt_final_y_m": statistics.fmean([r["gt_final_y"] for r in members]) if members else None,
        }
    medians = [b["median_length_m"] for b in length_by_speed if b["median_length_m"] is not None]
    by_size = {}
    for size in sorted({r["image_size"] for r in rows}):
        members = [r for r in rows if r["image_size"] == size]
        by_size[size] = {"count": len(members), "valid_rate": sum(r["valid"] for r in members) / len(members)}

    gated = [r["gate_ade"] for r in rows if r["plausible"]]

    def mean_of(key: str) -> float | None:
        return statistics.fmean([r[key] for r in valid]) if valid else None

    left, right, straight = (final_y[c]["mean_final_y_m"] for c in ("left", "right", "straight"))
    return {
        "samples": len(rows),
        "valid_rate": len(valid) / len(rows) if rows else 0.0,
        "plausible_rate": sum(r["plausible"] for r in rows) / len(rows) if rows else 0.0,
        "ade_m": mean_of("ade"),
        "fde_m": mean_of("fde"),
        "plausible_ade_m": statistics.fmean(gated) if gated else None,
        "median_ade_m": statistics.median([r["ade"] for r in valid]) if valid else None,
        "mean_steps_per_block": statistics.fmean(steps) if steps else None,
        "mean_blocks": statistics.fmean([len(r["steps"]) for r in rows]) if rows else None,
        "latency_mean_s": statistics.fmean(latencies) if latencies else None,
        "latency_p50_s": latencies[len(latencies) // 2] if latencies else None,
        "latency_p90_s": latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))] if latencies else None,
        "prompt_tokens": rows[0]["num_prompt_tokens"] if rows else None,
        "confidence": confidence_ranking(rows),
        "path_length_by_speed": length_by_speed,
        "by_speed_band": speed_bands(rows),
        "final_y_by_command": final_y,
        "valid_rate_by_image_size": by_size,
        "checks": {
            "length_grows_with_speed": len(medians) == len(bins) and all(a < b for a, b in itertools.pairwise(medians)),
            "left_final_y_positive": left is not None and left > 0.0,
            "right_final_y_negative": right is not None and right < 0.0,
            "straight_final_y_near_zero": straight is not None and abs(straight) < 1.0,
        },
    }


def confidence_ranking(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Does the plan's confidence (``core/confidence.py``) predict the gate's verdict (AUC, plans that pass against
    plans it rejects whose answer reads as waypoints) and rank the error of the plans that pass (Spearman of
    confidence against ADE; negative is useful)?"""
    scored = [r for r in rows if r.get("confidence") is not None]
    passed = [r for r in scored if r["plausible"]]
    return {
        "plans_scored": len(scored),
        "auc_passed_vs_rejected": separation_auc(
            [r["confidence"] for r in passed], [r["confidence"] for r in scored if not r["plausible"]]
        ),
        "spearman_vs_ade": spearman([r["confidence"] for r in passed], [r["gate_ade"] for r in passed]),
    }


def speed_bands(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per band of prompt speed (`SPEED_BANDS`): plans, the share that passes the kinematic gate, and ADE at 4 s
    (mean over the 8 waypoints) of the plans that pass it, as the replay measures it."""
    bands = []
    for lo, hi in SPEED_BANDS:
        members = [r for r in rows if lo <= r["speed"] < hi]
        passed = [r["gate_ade"] for r in members if r["plausible"]]
        bands.append(
            {
                "speed_m_s": [lo, hi if hi != float("inf") else None],
                "plans": len(members),
                "plausible_rate": len(passed) / len(members) if members else None,
                "ade_m": statistics.fmean(passed) if passed else None,
            }
        )
    return bands


SWEEP_SPEEDS = (2.0, 6.0, 10.0, 14.0, 18.0)


def behaviour_sweeps(engine: Any, pool: ImagePool, decode: DecodeConfig | None = None) -> dict[str, Any]:
    """Prompts that differ in one thing only: speed (straight, no acceleration) and command (at 8 m/s)."""
    straight_image = pool.images[pool.by_command["straight"][0]]
    lengths = []
    for speed in SWEEP_SPEEDS:
        result = engine.generate(build_planning_prompt("straight", (speed, 0.0), (0.0, 0.0)), [straight_image], decode)
        parsed = parse_waypoints(result.text, check_kinematics=False)  # behaviour, not plausibility
        lengths.append(path_length(np.array([[w.x, w.y] for w in parsed.waypoints])) if parsed.valid else None)
    final_y = {}
    for command in ("left", "straight", "right"):
        image = pool.images[pool.by_command[command][0]]
        result = engine.generate(build_planning_prompt(command, (8.0, 0.0), (0.0, 0.0)), [image], decode)
        parsed = parse_waypoints(result.text, check_kinematics=False)
        final_y[command] = parsed.waypoints[-1].y if parsed.valid else None
    return {"speeds_m_s": list(SWEEP_SPEEDS), "path_length_m": lengths, "final_y_m_at_8_m_s": final_y}
