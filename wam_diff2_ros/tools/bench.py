"""`wam-diff2-bench`: measure the decoder stage by stage on a checkpoint (or a random 2B model) and print figures.

Runs the NAVSIM planning prompt with synthetic camera frames through the same `Engine` the node uses, after
warm-up iterations, and prints per-stage latency (preprocess, vision, prefill, denoise, commit, total:
mean / p50 / p95), denoising steps per block, milliseconds per denoising forward, and peak device memory.
`--random-2b` builds the real WAM-Diff2-B32-2B architecture with random weights directly on the device, so the
speed of the full-size model can be measured without the checkpoint (its answers are meaningless, and a random
model rarely stops early: use `--max_new_tokens` to fix the work per call).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (decoding defaults: `DecodeConfig`'s)."""
    parser = argparse.ArgumentParser(prog="wam-diff2-bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_id", default="tiny", help="checkpoint dir, 'demo', or 'tiny' (a random tiny model)")
    parser.add_argument("--random-2b", action="store_true", help="random weights in the real 2B architecture")
    parser.add_argument("--text-layers", type=int, default=None, help="with --random-2b: fewer text layers")
    parser.add_argument("--vision-layers", type=int, default=None, help="with --random-2b: fewer vision layers")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--cameras", type=int, default=1, help="images per prompt")
    parser.add_argument("--batch", type=int, default=1, help="prompts decoded together")
    parser.add_argument(
        "--engine",
        action="append",
        choices=("exact", "fast", "auto"),
        default=None,
        help="decoding engine; repeat to compare engines on the same inputs (default: auto)",
    )
    parser.add_argument("--no-cuda-graphs", action="store_true", help="fast engine on CUDA without graphs")
    parser.add_argument("--max_new_tokens", type=int, default=None)
    parser.add_argument("--block_size", type=int, default=None)
    parser.add_argument("--denoising_steps", type=int, default=None)
    parser.add_argument("--remasking_strategy", default=None)
    parser.add_argument("--confidence_threshold", type=float, default=None)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--no-counters", action="store_true", help="skip the counted run (host reads, aten ops)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    return parser


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def load_engine(args: argparse.Namespace) -> Any:
    """The engine to measure ('demo', 'tiny' or a checkpoint directory; --random-2b swaps in random 2B weights)."""
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.demo import resolve_model

    engine = Engine.load(
        resolve_model("tiny" if args.random_2b else args.model_id), device=args.device, dtype=args.dtype
    )
    if args.random_2b:
        engine = _swap_in_random_2b(engine, args.dtype, args.text_layers, args.vision_layers)
    return engine


def _swap_in_random_2b(engine: Any, dtype: str, text_layers: int | None, vision_layers: int | None) -> Any:
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    from wam_diff2_ros.core.checkpoint import resolve_dtype
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.core.model import qwen3vl_config, wam_diff2_2b_config

    torch_dtype = resolve_dtype(dtype)
    raw = wam_diff2_2b_config()
    if text_layers:
        raw["text_config"]["num_hidden_layers"] = text_layers
    if vision_layers:
        raw["vision_config"]["depth"] = vision_layers
        raw["vision_config"]["deepstack_visual_indexes"] = [
            i for i in raw["vision_config"]["deepstack_visual_indexes"] if i < vision_layers
        ] or [vision_layers - 1]
    config = qwen3vl_config(raw)
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)
    try:
        with torch.device(engine.device):
            model = Qwen3VLForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(previous)
    return Engine(model.eval(), engine.processor, engine.checkpoint, engine.device)


def _model_name(args: argparse.Namespace, engine: Any) -> str:
    if not args.random_2b:
        return engine.name
    layers = f" ({args.text_layers or 28} text / {args.vision_layers or 24} vision layers)"
    return "random-2b" + (layers if args.text_layers or args.vision_layers else "")


def counted_run(engine: Any, conversations: list, decode: Any) -> dict[str, float]:
    """One decode with device->host reads and aten ops counted per phase (not timed)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from wam_diff2_ros.core.host_reads import count_host_reads

    ops: dict[str, int] = {}
    phase = ["other"]
    iterations = [0]  # denoising-loop iterations: forwards plus each block's final "nothing masked" check

    class OpCounter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops[phase[0]] = ops.get(phase[0], 0) + 1
            return func(*args, **(kwargs or {}))

    with count_host_reads() as reads:

        def observe(name: str) -> None:
            reads.phase = name
            phase[0] = name
            iterations[0] += name == "step"

        with OpCounter():
            result = engine.generate_conversations(conversations, decode, observe=observe)[0]
    steps = max(1, sum(result.steps_per_block))
    blocks = max(1, len(result.steps_per_block))
    return {
        "host_syncs_per_step": reads.by_phase.get("step", 0) / max(1, iterations[0]),
        "host_syncs_per_block": reads.by_phase.get("block", 0) / blocks,
        "host_syncs_total": reads.total,
        "ops_per_step": ops.get("step", 0) / steps,
    }


def measure_engine(engine: Any, conversations: list, decode: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, time `iterations` calls, then count one call; the figures of one engine."""
    import resource

    import torch

    for _ in range(args.warmup):
        engine.generate_conversations(conversations, decode)
    if engine.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(engine.device)
    rows = []
    for _ in range(args.iterations):
        started = time.perf_counter()
        results = engine.generate_conversations(conversations, decode)
        rows.append((results, time.perf_counter() - started))
    stages = ("preprocess_s", "vision_s", "prefill_s", "denoise_s", "commit_s", "total_s")
    figures: dict[str, Any] = {"stages_ms": {}}
    for stage in stages:
        values = [getattr(r[0].timing, stage) * 1000 for r, _ in rows]
        figures["stages_ms"][stage.removesuffix("_s")] = {
            "mean": statistics.fmean(values),
            "p50": _percentile(values, 50),
            "p95": _percentile(values, 95),
        }
    figures["total_ms"] = figures["stages_ms"]["total"]["p50"]
    steps = [s for r, _ in rows for s in r[0].steps_per_block]
    figures["steps_per_block"] = rows[0][0][0].steps_per_block
    figures["steps_per_block_mean"] = statistics.fmean(steps) if steps else 0.0
    figures["denoise_ms_per_step"] = sum(r[0].timing.denoise_s for r, _ in rows) * 1000 / max(1, sum(steps))
    figures["wall_ms_mean"] = statistics.fmean(w * 1000 for _, w in rows)
    if engine.device.type == "cuda":
        figures["peak_memory_mb"] = torch.cuda.max_memory_allocated(engine.device) / 2**20
    else:  # the process's resident high-water mark (never decreases: later engines include earlier ones)
        figures["peak_memory_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if not args.no_counters:
        figures.update(counted_run(engine, conversations, decode))
    figures["sequences"] = [g.sequence for g in rows[0][0]]
    figures["text"] = rows[0][0][0].text
    return figures


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every requested engine on the same inputs and return the figures."""
    from wam_diff2_ros.core.decoding import DecodeConfig
    from wam_diff2_ros.core.prompts import build_messages, build_planning_prompt

    engine = load_engine(args)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (args.height, args.width, 3), dtype=np.uint8) for _ in range(args.cameras)]
    template = "navsim"
    if args.cameras > 1:
        template = (
            "Cameras: "
            + " ".join(["<image>"] * args.cameras)
            + (
                "\nThe navigation information is: {command}\nThe current velocity is: ({vx},{vy})"
                " and current accelerate is: ({ax},{ay})\nPredict the next 8 waypoints."
            )
        )
    prompt = build_planning_prompt("straight", (6.0, 0.0), (0.3, 0.0), template=template, num_images=args.cameras)
    conversations = [build_messages(prompt, frames) for _ in range(args.batch)]
    base = DecodeConfig().with_overrides(
        max_new_tokens=args.max_new_tokens,
        block_size=args.block_size,
        denoising_steps=args.denoising_steps,
        remasking_strategy=args.remasking_strategy,
        confidence_threshold=args.confidence_threshold,
        cuda_graphs=False if args.no_cuda_graphs else None,
    )
    first = engine.generate_conversations(conversations[:1], base.with_overrides(engine="exact"), padding_side="left")
    figures: dict[str, Any] = {
        "model": _model_name(args, engine),
        "device": str(engine.device),
        "dtype": str(engine.dtype).removeprefix("torch."),
        "image": f"{args.width}x{args.height} x{args.cameras}",
        "batch": args.batch,
        "prompt_tokens": first[0].num_prompt_tokens,
        "image_tokens": first[0].num_image_tokens,
        "max_new_tokens": base.max_new_tokens,
        "iterations": args.iterations,
        "torch_threads": __import__("torch").get_num_threads(),
        "engines": {},
    }
    for name in args.engine or ["auto"]:
        figures["engines"][name] = measure_engine(engine, conversations, base.with_overrides(engine=name), args)
    results = list(figures["engines"].values())
    figures["tokens_identical"] = all(
        r["sequences"] == results[0]["sequences"] and r["steps_per_block"] == results[0]["steps_per_block"]
        for r in results
    )
    if "exact" in figures["engines"] and "fast" in figures["engines"]:
        exact, fast = figures["engines"]["exact"], figures["engines"]["fast"]
        figures["speedup"] = exact["total_ms"] / fast["total_ms"]
        figures["denoise_speedup"] = exact["denoise_ms_per_step"] / fast["denoise_ms_per_step"]
    return figures


def print_figures(figures: dict[str, Any]) -> None:
    """Human-readable table, one column per engine."""
    print(
        f"model {figures['model']} on {figures['device']} ({figures['dtype']}, {figures['torch_threads']} threads), "
        f"image {figures['image']}, batch {figures['batch']}, prompt {figures['prompt_tokens']} tokens "
        f"({figures['image_tokens']} image), max_new_tokens {figures['max_new_tokens']}"
    )
    names = list(figures["engines"])
    print(f"{'p50 ms':<24}" + "".join(f"{n:>14}" for n in names))
    for stage in figures["engines"][names[0]]["stages_ms"]:
        print(f"{stage:<24}" + "".join(f"{figures['engines'][n]['stages_ms'][stage]['p50']:>14.2f}" for n in names))
    for key in (
        "denoise_ms_per_step",
        "steps_per_block_mean",
        "host_syncs_per_step",
        "host_syncs_per_block",
        "ops_per_step",
        "peak_memory_mb",
    ):
        if key in figures["engines"][names[0]]:
            print(f"{key:<24}" + "".join(f"{figures['engines'][n][key]:>14.2f}" for n in names))
    print("steps per block: " + "; ".join(f"{n} {figures['engines'][n]['steps_per_block']}" for n in names))
    line = f"tokens identical: {figures['tokens_identical']}"
    if "speedup" in figures:
        line += f", speedup (total p50) {figures['speedup']:.2f}x, denoise per step {figures['denoise_speedup']:.2f}x"
    print(line)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.iterations < 1 or args.warmup < 0 or args.cameras < 1 or args.batch < 1:
        print(
            "wam-diff2-bench: error: need --iterations >= 1, --warmup >= 0, --cameras >= 1, --batch >= 1",
            file=sys.stderr,
        )
        return 2
    try:
        figures = run(args)
    except Exception as exc:
        print(f"wam-diff2-bench: error: {exc}", file=sys.stderr)
        return 1
    print_figures(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
