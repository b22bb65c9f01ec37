"""Benchmark runs (`wam-diff2-bench`): the decoder measured stage by stage on a checkpoint or a random 2B model.

Runs the NAVSIM planning prompt with synthetic camera frames through the same `Engine` the node uses, after
warm-up iterations, and prints per-stage latency (preprocess, vision, prefill, denoise, commit, total:
mean / p50 / p95), denoising steps per block, milliseconds per denoising forward, and peak device memory.
`--random-2b` builds the real WAM-Diff2-B32-2B architecture with random weights directly on the device, so the
speed of the full-size model can be measured without the checkpoint (its answers are meaningless, and a random
model rarely stops early: use `--max-new-tokens` to fix the work per call).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

FUSED = "fused"  # the fused engine (not bit-identical; admitted by the agreement yardstick)
ENGINE_CHOICES = ("exact", "fast", "auto", FUSED)


@dataclass(frozen=True)
class ModelSettings:
    """The model a benchmark loads and the camera frames it is given (flags shared by every subcommand)."""

    model_id: str = "tiny"
    random_2b: bool = False
    text_layers: int | None = None
    vision_layers: int | None = None
    device: str = "auto"
    dtype: str = "bfloat16"
    width: int = 1920
    height: int = 1080


@dataclass(frozen=True)
class BenchSettings(ModelSettings):
    """What to measure and how often (the CLI's flags; a decoding field left None takes `DecodeConfig`'s)."""

    cameras: int = 1
    batch: int = 1
    engine: tuple[str, ...] = ("auto",)
    no_cuda_graphs: bool = False
    max_new_tokens: int | None = None
    block_size: int | None = None
    denoising_steps: int | None = None
    remasking_strategy: str | None = None
    confidence_threshold: float | None = None
    deadline_ms: float | None = None
    warmup: int = 2
    iterations: int = 10
    no_counters: bool = False


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def load_engine(settings: BenchSettings) -> Any:
    """The engine to measure ('demo', 'tiny' or a checkpoint directory; --random-2b swaps in random 2B weights)."""
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.demo import resolve_model

    engine = Engine.load(
        resolve_model("tiny" if settings.random_2b else settings.model_id), device=settings.device, dtype=settings.dtype
    )
    if settings.random_2b:
        engine = _swap_in_random_2b(engine, settings.dtype, settings.text_layers, settings.vision_layers)
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


def _model_name(settings: BenchSettings, engine: Any) -> str:
    if not settings.random_2b:
        return engine.name
    layers = f" ({settings.text_layers or 28} text / {settings.vision_layers or 24} vision layers)"
    return "random-2b" + (layers if settings.text_layers or settings.vision_layers else "")


def counted_run(engine: Any, conversations: list, decode: Any) -> dict[str, float]:
    """One decode with device->host reads and aten ops counted per phase (not timed)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from wam_diff2_ros.bench.host_reads import count_host_reads
    from wam_diff2_ros.core.engine.fused import stock_chains

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

        with stock_chains(), OpCounter():
            result = engine.generate_conversations(conversations, decode, observe=observe)[0]
    steps = max(1, sum(result.steps_per_block))
    blocks = max(1, len(result.steps_per_block))
    return {
        "host_syncs_per_step": reads.by_phase.get("step", 0) / max(1, iterations[0]),
        "host_syncs_per_block": reads.by_phase.get("block", 0) / blocks,
        "host_syncs_total": reads.total,
        # fused kernels are no aten ops (and run unfused under the counter): not counted for them
        "ops_per_step": None if decode.engine == FUSED else ops.get("step", 0) / steps,
    }


def measure_engine(engine: Any, conversations: list, decode: Any, settings: BenchSettings) -> dict[str, Any]:
    """Warm up, time `iterations` calls, then count one call; the figures of one engine."""
    import resource

    import torch

    for _ in range(settings.warmup):
        engine.generate_conversations(conversations, decode)
    if engine.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(engine.device)
    rows = []
    for _ in range(settings.iterations):
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
    if not settings.no_counters:
        figures.update(counted_run(engine, conversations, decode))
    figures["sequences"] = [g.sequence for g in rows[0][0]]
    figures["text"] = rows[0][0][0].text
    return figures


def workload(settings: BenchSettings) -> tuple[list, Any]:
    """The benchmark's inputs: `batch` planning conversations on seeded noise frames, and the base decoding."""
    from wam_diff2_ros.core.engine.decoding import DecodeConfig
    from wam_diff2_ros.core.prompts import build_messages, build_planning_prompt

    rng = np.random.default_rng(0)
    frames = [
        rng.integers(0, 256, (settings.height, settings.width, 3), dtype=np.uint8) for _ in range(settings.cameras)
    ]
    template = "navsim"
    if settings.cameras > 1:
        template = (
            "Cameras: "
            + " ".join(["<image>"] * settings.cameras)
            + (
                "\nThe navigation information is: {command}\nThe current velocity is: ({vx},{vy})"
                " and current accelerate is: ({ax},{ay})\nPredict the next 8 waypoints."
            )
        )
    prompt = build_planning_prompt("straight", (6.0, 0.0), (0.3, 0.0), template=template, num_images=settings.cameras)
    conversations = [build_messages(prompt, frames) for _ in range(settings.batch)]
    base = DecodeConfig().with_overrides(
        max_new_tokens=settings.max_new_tokens,
        block_size=settings.block_size,
        denoising_steps=settings.denoising_steps,
        remasking_strategy=settings.remasking_strategy,
        confidence_threshold=settings.confidence_threshold,
        deadline_ms=settings.deadline_ms,
        cuda_graphs=False if settings.no_cuda_graphs else None,
    )
    return conversations, base


def run(settings: BenchSettings) -> dict[str, Any]:
    """Measure every requested engine on the same inputs and return the figures."""
    engine = load_engine(settings)
    conversations, base = workload(settings)
    first = engine.generate_conversations(conversations[:1], base.with_overrides(engine="exact"), padding_side="left")
    figures: dict[str, Any] = {
        "model": _model_name(settings, engine),
        "device": str(engine.device),
        "dtype": str(engine.dtype).removeprefix("torch."),
        "image": f"{settings.width}x{settings.height} x{settings.cameras}",
        "batch": settings.batch,
        "prompt_tokens": first[0].num_prompt_tokens,
        "image_tokens": first[0].num_image_tokens,
        "max_new_tokens": base.max_new_tokens,
        "iterations": settings.iterations,
        "torch_threads": __import__("torch").get_num_threads(),
        "engines": {},
    }
    for name in dict.fromkeys(settings.engine):
        figures["engines"][name] = measure_engine(engine, conversations, engine_config(base, name), settings)
    engines = figures["engines"]
    results = [r for n, r in engines.items() if n != FUSED] or list(engines.values())
    figures["tokens_identical"] = all(_same_tokens(r, results[0]) for r in results)
    if FUSED in engines and len(engines) > 1:
        figures["fused_tokens_identical"] = _same_tokens(engines[FUSED], results[0])
    for name, key in (("fast", ""), (FUSED, "fused_")):
        if "exact" in engines and name in engines:
            exact, other = engines["exact"], engines[name]
            figures[f"{key}speedup"] = exact["total_ms"] / other["total_ms"]
            figures[f"{key}denoise_speedup"] = exact["denoise_ms_per_step"] / other["denoise_ms_per_step"]
    from wam_diff2_ros.core.engine.cpu_kernels import kernel_loads, kernel_paths

    figures["cpu_kernels"] = {"loads": kernel_loads(), "paths": kernel_paths()}  # which shape ran the kernel
    return figures


def engine_config(base: Any, name: str) -> Any:
    """The decoding config of a benchmarked engine name."""
    return base.with_overrides(engine=name)


def _same_tokens(result: dict[str, Any], other: dict[str, Any]) -> bool:
    return result["sequences"] == other["sequences"] and result["steps_per_block"] == other["steps_per_block"]
