"""Candidate plans' cost (`wam-diff2-bench candidates --candidates N`, also `wam-diff2-bench --candidates N`).

For each N the planning prompt's N answers (row 0 greedy, the others sampled at `planning.candidate_temperature`'s
default) are decoded two ways on the same engine, in one run, interleaved plan by plan: as one batch after one
shared prefill (`Engine.generate_candidates`, what the node does) and one decode after another
(`core.candidates.sequential_candidates`). Every block takes exactly `--steps-per-block` steps (the static
schedule, the demo model's typical count by default), so each row does the same work either way and the figures
compare the execution, not the luck of the sampled rows. Printed per N: median ms per plan (all N answers) of each
way, and the ratios to one greedy plan (N = 1) and of batch to sequential.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wam_diff2_ros.bench.runs import ModelSettings
from wam_diff2_ros.core.candidates import (
    DEFAULT_CANDIDATE_TEMPERATURE,
    MAX_CANDIDATES,
    row_temperatures,
    sequential_candidates,
)
from wam_diff2_ros.core.engine.decoding import DecodeConfig

PROMPT = (
    "Here is a front-view images from a driving vehicle: <image>\nThe navigation information is: straight\n"
    "The current position is (0.00,0.00)\nThe current velocity is: (8.00,0.00) and current accelerate is: "
    "(0.00,0.00)\nInstruction: predict the optimal driving action for the next 4 seconds with 8 new waypoints."
)


@dataclass(frozen=True)
class CandidatesSettings(ModelSettings):
    """What the candidates benchmark runs (the CLI's flags)."""

    candidates: tuple[int, ...] = (1, 2, 4, 8)
    steps_per_block: int = 13
    blocks: int = 3
    plans: int = 5
    warmup: int = 1
    engine: str = "auto"


def _decode(settings: CandidatesSettings) -> DecodeConfig:
    base = DecodeConfig(engine=settings.engine, seed=0)
    return base.with_overrides(
        max_new_tokens=settings.blocks * base.block_size,
        remasking_strategy="low_confidence_static",
        denoising_steps=settings.steps_per_block,
    )


def run_candidates(settings: CandidatesSettings) -> dict[str, Any]:
    """Median ms per plan, batch and sequential, for each N (see the module docstring)."""
    import torch

    from wam_diff2_ros.bench.runs import BenchSettings, load_engine

    for count in settings.candidates:
        if not 1 <= count <= MAX_CANDIDATES:
            raise ValueError(f"--candidates must be in [1, {MAX_CANDIDATES}], got {count}")
    fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(ModelSettings)}
    engine = load_engine(BenchSettings(**fields))
    decode = _decode(settings)
    image = np.random.default_rng(0).integers(0, 256, (settings.height, settings.width, 3), dtype=np.uint8)
    ways = {  # one answer (N = 1) is the node's single greedy decode
        "batch": lambda temps: (
            engine.generate_candidates(PROMPT, [image], temps, decode=decode)
            if len(temps) > 1
            else [engine.generate(PROMPT, [image], decode=decode)]
        ),
        "sequential": lambda temps: sequential_candidates(engine, PROMPT, [image], temps, decode),
    }
    for _ in range(settings.warmup):  # every batch shape once (the CPU kernels are probed per shape), one decode
        for count in settings.candidates:
            ways["batch"](row_temperatures(count, DEFAULT_CANDIDATE_TEMPERATURE))
        ways["sequential"](row_temperatures(1, DEFAULT_CANDIDATE_TEMPERATURE))
    times: dict[int, dict[str, list[float]]] = {n: {name: [] for name in ways} for n in settings.candidates}
    for _ in range(settings.plans):
        for count in settings.candidates:
            temperatures = row_temperatures(count, DEFAULT_CANDIDATE_TEMPERATURE)
            for name, way in ways.items():
                if name == "sequential" and count == 1:
                    times[count][name].append(times[count]["batch"][-1])  # the same single decode
                    continue
                started = time.perf_counter()
                way(temperatures)
                times[count][name].append((time.perf_counter() - started) * 1000)
    medians = {n: {name: statistics.median(values) for name, values in ways_.items()} for n, ways_ in times.items()}
    single = medians[min(medians)]["batch"] if 1 in medians else None
    rows = {
        str(n): {
            "batch_ms": m["batch"],
            "sequential_ms": m["sequential"],
            "batch_over_sequential": m["batch"] / m["sequential"],
            "batch_over_one_plan": m["batch"] / single if single else None,
            "sequential_over_one_plan": m["sequential"] / single if single else None,
        }
        for n, m in medians.items()
    }
    return {
        "model": engine.name,
        "device": str(engine.device),
        "dtype": str(engine.dtype).removeprefix("torch."),
        "engine": engine.describe_decoding(decode),
        "image": f"{settings.width}x{settings.height}",
        "blocks": settings.blocks,
        "steps_per_block": settings.steps_per_block,
        "plans": settings.plans,
        "torch_threads": torch.get_num_threads(),
        "candidates": rows,
    }


def print_candidates(figures: dict[str, Any]) -> None:
    """The table: per N the median ms per plan of each way and the ratios."""
    print(
        f"candidates: model {figures['model']} on {figures['device']} ({figures['dtype']}, {figures['torch_threads']} "
        f"threads), engine {figures['engine']}, image {figures['image']}, {figures['blocks']} blocks x "
        f"{figures['steps_per_block']} steps, median of {figures['plans']} plans"
    )
    print(f"{'N':>3}{'batch ms':>12}{'sequential ms':>15}{'batch/seq':>11}{'batch/1 plan':>14}{'seq/1 plan':>12}")
    for n, row in figures["candidates"].items():
        over = row["batch_over_one_plan"]
        seq = row["sequential_over_one_plan"]
        print(
            f"{n:>3}{row['batch_ms']:>12.0f}{row['sequential_ms']:>15.0f}{row['batch_over_sequential']:>11.2f}"
            f"{'' if over is None else f'{over:.2f}':>14}{'' if seq is None else f'{seq:.2f}':>12}"
        )


def build_parser() -> argparse.ArgumentParser:
    """The model flags and the candidates group."""
    parser = argparse.ArgumentParser(prog="wam-diff2-bench candidates", description=__doc__.split("\n\n")[0])
    defaults = CandidatesSettings()
    parser.add_argument("--model-id", default="demo", help="checkpoint dir, 'demo', or 'tiny'")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--engine", default=defaults.engine, help="decoding.engine")
    parser.add_argument(
        "--candidates", type=int, action="append", default=None, help="N to measure; repeat (default 1, 2, 4, 8)"
    )
    parser.add_argument("--steps-per-block", type=int, default=defaults.steps_per_block)
    parser.add_argument("--blocks", type=int, default=defaults.blocks)
    parser.add_argument("--plans", type=int, default=defaults.plans, help="timed plans per N and way")
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--json", type=argparse.FileType("w"), default=None, help="also write the figures here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`wam-diff2-bench candidates`; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.plans < 1 or args.warmup < 0 or args.blocks < 1 or args.steps_per_block < 1:
        print("wam-diff2-bench candidates: error: need --plans, --blocks, --steps-per-block >= 1", file=sys.stderr)
        return 2
    settings = CandidatesSettings(
        model_id=args.model_id,
        device=args.device,
        dtype=args.dtype,
        width=args.width,
        height=args.height,
        engine=args.engine,
        candidates=tuple(sorted(set(args.candidates or CandidatesSettings().candidates))),
        steps_per_block=args.steps_per_block,
        blocks=args.blocks,
        plans=args.plans,
        warmup=args.warmup,
    )
    try:
        figures = run_candidates(settings)
    except Exception as exc:
        print(f"wam-diff2-bench candidates: error: {exc}", file=sys.stderr)
        return 1
    print_candidates(figures)
    if args.json:
        args.json.write(json.dumps(figures, indent=2) + "\n")
    return 0
