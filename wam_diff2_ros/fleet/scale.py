"""Measure ``wam-diff2-fleet`` against ``wam-diff2-replay`` run one bag after another, on the same bags.

::

    wam-diff2-fleet scale WORK_DIR [--model demo] [--workers 2] [--rate-hz 0.5] [--max-plans 3]

Writes 8 synthetic bags (different seeds, lengths, image sizes and transports; the 12 s ones include the drive's
left turn; one truncated, one without odometry) under ``WORK_DIR/bags``, replays them one after another with
``wam-diff2-replay`` (each a fresh process, as a user would run them; torch on all cores unless
``--replay-threads``), then with
``wam-diff2-fleet --workers N`` (embedded Ray; each worker one core), and prints the wall times, their ratio and
whether every bag's predictions (all fields but the wall-clock timings) are identical. The JSON lands in
``WORK_DIR/fleet_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: name, seed, seconds, width, height, raw images, what to damage or leave out
BAGS = (
    ("short_a", 101, 4.0, 320, 180, False, None),
    ("short_b", 102, 4.0, 480, 270, False, None),
    ("short_raw", 103, 3.0, 256, 144, True, None),
    ("turn_a", 104, 12.0, 320, 180, False, None),
    ("turn_b", 105, 12.0, 640, 360, False, None),
    ("turn_c", 106, 10.0, 400, 224, False, None),
    ("damaged", 107, 6.0, 320, 180, False, "truncate"),
    ("no_odometry", 108, 4.0, 320, 180, False, "no_odometry"),
)


def make_bags(root: Path) -> list[Path]:
    from wam_diff2_ros.sim import make_sample_bag

    paths = []
    for name, seed, seconds, width, height, raw, damage in BAGS:
        path = root / name
        if not (path / "metadata.yaml").is_file():
            without = ("odometry",) if damage == "no_odometry" else ()
            make_sample_bag(path, seconds=seconds, seed=seed, width=width, height=height, raw=raw, without=without)
            if damage == "truncate":
                storage = next(path.glob("*.mcap"))
                data = storage.read_bytes()
                storage.write_bytes(data[: int(len(data) * 0.6)])
        paths.append(path)
    return paths


def predictions(folder: Path) -> list[dict]:
    path = folder / "predictions.jsonl"
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "timing"} for line in lines]


def main(argv: list[str] | None = None) -> int:
    """`wam-diff2-fleet scale`; returns the exit code (1 when a bag's predictions differ)."""
    parser = argparse.ArgumentParser(prog="wam-diff2-fleet scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--model", default="demo")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate-hz", default="0.5")
    parser.add_argument("--max-plans", default="3", help="per bag (keeps the run short on a busy machine)")
    parser.add_argument("--replay-threads", type=int, default=os.cpu_count() or 1, help="torch threads of each replay")
    args = parser.parse_args(argv)
    work = args.work.resolve()
    bags = make_bags(work / "bags")
    common = ["--model", args.model, "--rate-hz", args.rate_hz, "--max-plans", args.max_plans, "--no-progress"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.replay_threads))

    sequential_s = {}
    started = time.perf_counter()
    for bag in bags:
        out = work / "sequential" / bag.name
        t0 = time.perf_counter()
        command = [sys.executable, "-m", "wam_diff2_ros.cli.replay", str(bag), "--out", str(out), "--overwrite"]
        subprocess.run([*command, *common], env=env, capture_output=True, check=False)
        sequential_s[bag.name] = time.perf_counter() - t0
    sequential_total = time.perf_counter() - started

    fleet_out = work / "fleet"
    t0 = time.perf_counter()
    command = [sys.executable, "-m", "wam_diff2_ros.cli.fleet", str(work / "bags"), "--out", str(fleet_out)]
    fleet_run = subprocess.run(
        [*command, *common, "--workers", str(args.workers)], env=env, capture_output=True, text=True, check=False
    )
    fleet_total = time.perf_counter() - t0
    summary = json.loads(fleet_run.stdout) if fleet_run.stdout.strip().startswith("{") else {}

    per_bag = {}
    for bag in bags:
        single, many = predictions(work / "sequential" / bag.name), predictions(fleet_out / "bags" / bag.name)
        record = json.loads((fleet_out / "bags" / bag.name / "fleet.json").read_text())
        per_bag[bag.name] = {
            "instants": len(single),
            "identical": single == many,
            "fleet_status": record["status"],
            "fleet_exit_code": record["exit_code"],
            "sequential_s": round(sequential_s[bag.name], 1),
            "fleet_bag_s": round(record["wall_s"], 1),
        }
    result = {
        "machine": f"{os.cpu_count()} cores, shared with other work",
        "model": args.model,
        "rate_hz": args.rate_hz,
        "max_plans": args.max_plans,
        "workers": args.workers,
        "replay_threads": args.replay_threads,
        "sequential_wall_s": round(sequential_total, 1),
        "fleet_wall_s": round(fleet_total, 1),
        "speedup": round(sequential_total / fleet_total, 2),
        "all_identical": all(b["identical"] for b in per_bag.values()),
        "fleet_exit_code": fleet_run.returncode,
        "fleet_summary": summary,
        "bags": per_bag,
    }
    (work / "fleet_scale.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0 if result["all_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
