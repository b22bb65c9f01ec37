"""The candidate-plan table of docs/candidates.md from replay output folders (``wam-diff2-replay ... --out DIR``).

Per folder: its bag (``metrics.json`` ``run.bag``), N (``run.overrides`` ``planning.candidates``, else 1) and the
figures of ``replay.candidates.candidate_summary``, recomputed from ``predictions.jsonl`` against the bag's odometry;
then, per N, the same figures pooled over every bag except ``--sample`` (the drives the model never saw), as the
fleet report pools them.

    python scripts/candidates_table.py RUN_DIR... [--sample drive_0]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from wam_diff2_ros.bag import BagReader
from wam_diff2_ros.core.planning import PlanningConfig
from wam_diff2_ros.replay.candidates import candidate_pairs, candidate_summary
from wam_diff2_ros.replay.evaluation import EgoTrack, compute_metrics
from wam_diff2_ros.replay.report import plan_records_for_metrics


def run_pairs(folder: Path) -> tuple[str, int, list[Any]]:
    """(bag name, N, (record, instant) pairs) of one replay folder."""
    metrics = json.loads((folder / "metrics.json").read_text())
    run = metrics["run"]
    overrides = run.get("overrides") or {}
    count = int(overrides.get("planning.candidates", 1)) if isinstance(overrides, dict) else 1
    lines = (folder / "predictions.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    planned = [r for r in records if r["status"] == "planned"]
    with BagReader(run["bag"]) as reader:
        odometry = list(reader.messages([run["topics"]["odometry"]]))
    track = EgoTrack.from_odometry(odometry)
    planning = PlanningConfig()
    rows = plan_records_for_metrics(planned, planning.num_waypoints, planning.waypoint_dt_s)
    instants = compute_metrics(rows, track, include_instants=True)["instants"]
    return Path(run["bag"]).name, count, candidate_pairs(planned, instants)


def cells(summary: dict[str, Any]) -> str:
    def num(value: Any, digits: int = 2) -> str:
        return "–" if value is None else f"{value:.{digits}f}"

    valid = summary["valid_rate"]
    return (
        f"{summary['plans']} | {'–' if valid is None else f'{100 * valid:.0f} %'} | {num(summary['ade_4s'])} | "
        f"{num(summary['fde_4s'])} | {num(summary['score_spearman_vs_ade_4s'])} | "
        f"{num(summary['mean_valid_candidates'], 1)} | {summary['greedy_rejected_sampled_published']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--sample", default="drive_0", help="the bag the model was selected on (not pooled)")
    args = parser.parse_args()
    header = (
        "| drive | N | plans | valid | ADE 4 s (m) | FDE 4 s (m) | score–ADE Spearman | valid candidates | rescued |"
    )
    print(header)
    print("| --- " * 9 + "|")
    pooled: dict[int, list[Any]] = defaultdict(list)
    for folder in args.runs:
        if not (folder / "metrics.json").is_file():
            continue
        bag, count, pairs = run_pairs(folder)
        print(f"| {bag} | {count} | {cells(candidate_summary(pairs))} |")
        if bag != args.sample:
            pooled[count].extend(pairs)
    for count in sorted(pooled):
        print(f"| unseen, pooled | {count} | {cells(candidate_summary(pooled[count]))} |")


if __name__ == "__main__":
    main()
