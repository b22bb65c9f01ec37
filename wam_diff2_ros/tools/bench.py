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
    """Command-line flags."""
    parser = argparse.ArgumentParser(prog="wam-diff2-bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_id", default="tiny", help="checkpoint dir, 'demo', or 'tiny' (a random tiny model)")
    parser.add_argument("--random-2b", action="store_true", help="random weights in the real 2B architecture")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--cameras", type=int, default=1, help="images per prompt")
    parser.add_argument("--batch", type=int, default=1, help="prompts decoded together")
    parser.add_argument("--max_new_tokens", type=int, default=96)
    parser.add_argument("--block_size", type=int, default=32)
    parser.add_argument("--denoising_steps", type=int, default=32)
    parser.add_argument("--remasking_strategy", default="low_confidence_dynamic")
    parser.add_argument("--confidence_threshold", type=float, default=0.9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    return parser


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def load_engine(args: argparse.Namespace) -> Any:
    """The engine to measure."""
    import tempfile

    from wam_diff2_ros.core.engine import Engine

    if args.model_id == "tiny" or args.random_2b:
        from wam_diff2_ros.demo.tiny import make_tiny_checkpoint

        path = make_tiny_checkpoint(Path(tempfile.mkdtemp(prefix="wam_diff2_bench_")))
    else:
        from wam_diff2_ros.demo import resolve_model

        path = resolve_model(args.model_id)
    engine = Engine.load(path, device=args.device, dtype=args.dtype)
    if args.random_2b:
        engine = _swap_in_random_2b(engine, args.dtype)
    return engine


def _swap_in_random_2b(engine: Any, dtype: str) -> Any:
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    from wam_diff2_ros.core.checkpoint import resolve_dtype
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.core.model import qwen3vl_config, wam_diff2_2b_config

    torch_dtype = resolve_dtype(dtype)
    config = qwen3vl_config(wam_diff2_2b_config())
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)
    try:
        with torch.device(engine.device):
            model = Qwen3VLForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(previous)
    return Engine(model.eval(), engine.processor, engine.checkpoint, engine.device)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, measure, and return the figures."""
    import torch

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
    decode = DecodeConfig(
        max_new_tokens=args.max_new_tokens,
        block_size=args.block_size,
        denoising_steps=args.denoising_steps,
        remasking_strategy=args.remasking_strategy,
        confidence_threshold=args.confidence_threshold,
    )
    for _ in range(args.warmup):
        engine.generate_conversations(conversations, decode)
    if engine.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(engine.device)
    rows = []
    for _ in range(args.iterations):
        started = time.perf_counter()
        result = engine.generate_conversations(conversations, decode)[0]
        wall = time.perf_counter() - started
        rows.append((result, wall))
    stages = ("preprocess_s", "vision_s", "prefill_s", "denoise_s", "commit_s", "total_s")
    figures: dict[str, Any] = {
        "model": "random-2b" if args.random_2b else engine.name,
        "device": str(engine.device),
        "dtype": str(engine.dtype).removeprefix("torch."),
        "image": f"{args.width}x{args.height} x{args.cameras}",
        "batch": args.batch,
        "prompt_tokens": rows[0][0].num_prompt_tokens,
        "image_tokens": rows[0][0].num_image_tokens,
        "iterations": args.iterations,
        "stages_ms": {},
    }
    for stage in stages:
        values = [getattr(r.timing, stage) * 1000 for r, _ in rows]
        figures["stages_ms"][stage.removesuffix("_s")] = {
            "mean": statistics.fmean(values),
            "p50": _percentile(values, 50),
            "p95": _percentile(values, 95),
        }
    steps = [s for r, _ in rows for s in r.steps_per_block]
    forwards = sum(steps)
    figures["steps_per_block_mean"] = statistics.fmean(steps) if steps else 0.0
    figures["blocks_per_call_mean"] = statistics.fmean(len(r.steps_per_block) for r, _ in rows)
    figures["ms_per_denoising_forward"] = sum(r.timing.denoise_s for r, _ in rows) * 1000 / max(1, forwards)
    figures["wall_ms_mean"] = statistics.fmean(w * 1000 for _, w in rows)
    if engine.device.type == "cuda":
        figures["peak_memory_gib"] = torch.cuda.max_memory_allocated(engine.device) / 2**30
    return figures


def print_figures(figures: dict[str, Any]) -> None:
    """Human-readable table."""
    print(
        f"model {figures['model']} on {figures['device']} ({figures['dtype']}), image {figures['image']}, "
        f"batch {figures['batch']}, prompt {figures['prompt_tokens']} tokens ({figures['image_tokens']} image)"
    )
    print(f"{'stage':<12}{'mean ms':>12}{'p50 ms':>12}{'p95 ms':>12}")
    for stage, values in figures["stages_ms"].items():
        print(f"{stage:<12}{values['mean']:>12.2f}{values['p50']:>12.2f}{values['p95']:>12.2f}")
    print(
        f"steps/block {figures['steps_per_block_mean']:.2f}, blocks/call {figures['blocks_per_call_mean']:.2f}, "
        f"{figures['ms_per_denoising_forward']:.2f} ms per denoising step (incl. sampling/remasking), "
        f"wall {figures['wall_ms_mean']:.1f} ms"
    )
    if "peak_memory_gib" in figures:
        print(f"peak device memory {figures['peak_memory_gib']:.2f} GiB")


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
