"""Where a captured denoising step's GPU time goes: replay time, kernels per step and GPU time by kind.

Decodes the benchmark's workload once per engine variant (CUDA graphs on), then replays the step graph it
captured: timed with CUDA events (median of `--replays`), and once under the profiler, whose kernels are
grouped by name into matrix products, attention, Triton (fused) kernels and other element-wise/copy kernels.
Also times the eager rest of a step (the "anything masked?" read, greedy sampling, remasking) on the replayed
logits. Takes `wam-diff2-bench`'s flags (only `fast` and `fast-compiled` have graphs):

    python scripts/profile_gpu_step.py --random-2b --device cuda --dtype bfloat16 --width 1920 --height 1080 \
        --engine fast --engine fast-compiled --json profile.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from typing import Any

import torch

from wam_diff2_ros.bench.runs import engine_config, load_engine, workload
from wam_diff2_ros.cli.bench import build_parser, settings_from
from wam_diff2_ros.core.decoding import sample_tokens, select_transfers

KINDS = (  # first match wins; lower-case substrings of kernel names
    ("attention", ("fmha", "flash", "attention", "efficient")),
    ("matmul", ("gemm", "gemv", "nvjet", "cutlass", "xmma", "splitk")),
    ("triton (fused)", ("triton",)),
)


def kind_of(name: str) -> str:
    """The kind of a kernel, from its name."""
    lowered = name.lower()
    return next((kind for kind, keys in KINDS if any(k in lowered for k in keys)), "other")


def median_ms(function: Any, repeats: int) -> float:
    """Median milliseconds of `function()` on the current stream (CUDA events, after 3 warm-up calls)."""
    for _ in range(3):
        function()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def rest_of_step_ms(logits: torch.Tensor, repeats: int) -> float:
    """The eager rest of a denoising step on a block's logits [B, L, V]: read, greedy sampling, remasking."""
    batch, length = logits.shape[:2]
    masked = torch.ones(batch, length, dtype=torch.bool, device=logits.device)
    tokens = torch.zeros(batch, length, dtype=torch.long, device=logits.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=logits.device)

    def rest() -> None:
        if not masked.any():  # the step's device->host read
            return
        proposal, confidence = sample_tokens(logits)
        transfer = select_transfers("low_confidence_dynamic", masked, confidence, 1, 0.9, finished)
        torch.where(transfer, proposal, tokens)

    return median_ms(rest, repeats)


def profile_graph(graph: Any, replays: int) -> dict[str, Any]:
    """Median replay time (CUDA events) and the kernels of one replay by kind."""
    replay_ms = median_ms(graph.replay, replays)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kinds: dict[str, dict[str, float]] = defaultdict(lambda: {"kernels": 0, "gpu_ms": 0.0})
    top: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        entry = kinds[kind_of(event.name)]
        entry["kernels"] += 1
        entry["gpu_ms"] += event.device_time_total / 1000
        top[event.name[:90]] += event.device_time_total / 1000
    return {
        "replay_ms_median": replay_ms,
        "kernels": sum(int(k["kernels"]) for k in kinds.values()),
        "by_kind": dict(kinds),
        "top_kernels_ms": dict(sorted(top.items(), key=lambda item: -item[1])[:12]),
    }


def main() -> int:
    parser = build_parser()
    parser.add_argument("--replays", type=int, default=50)
    args = parser.parse_args()
    settings = settings_from(args)
    engine = load_engine(settings)
    conversations, base = workload(settings)
    results: dict[str, Any] = {}
    for name in settings.engine:
        config = engine_config(base, name).with_overrides(cuda_graphs=True)
        for _ in range(2):  # capture, then a plain run
            engine.generate_conversations(conversations, config)
        store = getattr(engine.backbone, "_cuda_graph_steps", None)
        entries = [e for k, e in (store.graphs.items() if store else []) if k[3] == config.torch_compile]
        if not entries:
            print(f"{name}: no captured step graph (not CUDA, or the capture failed)")
            continue
        results[name] = figures = profile_graph(entries[-1]["graph"], args.replays)
        figures["rest_of_step_ms_median"] = rest_of_step_ms(entries[-1]["logits"], args.replays)
        print(
            f"== {name}: replay {figures['replay_ms_median']:.3f} ms (median), {figures['kernels']} kernels; "
            f"eager rest of a step {figures['rest_of_step_ms_median']:.3f} ms"
        )
        for kind, entry in sorted(figures["by_kind"].items(), key=lambda item: -item[1]["gpu_ms"]):
            print(f"   {kind:<16} {int(entry['kernels']):>6} kernels {entry['gpu_ms']:>9.3f} ms")
        for kernel, ms in figures["top_kernels_ms"].items():
            print(f"   {ms:9.3f} ms  {kernel}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
