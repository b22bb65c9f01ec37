"""Where a plan's GPU time goes: the captured denoising step, and each phase of one whole plan.

Decodes the benchmark's workload once per engine variant (CUDA graphs on), then
- replays the step graph it captured: timed with CUDA events (median of `--replays`), and once under the
  profiler, whose kernels are grouped by name into matrix products, attention, Triton (fused) kernels and
  other element-wise/copy kernels; also times the eager rest of a step (the "anything masked?" read, greedy
  sampling, remasking) on the replayed logits (`step_graphs` in the JSON);
- profiles one more plan with a profiler range per decoder phase (prefill, vision inside it, step, block,
  commit): per phase the host wall time, the GPU time of the kernels that start in it, their count and kinds
  (`plan_phases`). GPU time well under the wall time marks a phase bound by the host (launches, syncs).
Takes `wam-diff2-bench`'s flags (only `fast` and `fused` have graphs; the plan profile runs anywhere):

    wam-diff2-bench profile-gpu-step --random-2b --device cuda --dtype bfloat16 --width 1920 --height 1080 \
        --engine fast --engine fused --json profile.json
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch

from wam_diff2_ros.bench.flags import build_parser, settings_from
from wam_diff2_ros.bench.runs import engine_config, load_engine, workload
from wam_diff2_ros.bench.timing import median_ms
from wam_diff2_ros.core.engine.decoding import select_transfers
from wam_diff2_ros.core.engine.sampling import sample_tokens

KINDS = (  # first match wins; lower-case substrings of kernel names
    ("attention", ("fmha", "flash", "attention", "efficient")),
    ("matmul", ("gemm", "gemv", "nvjet", "cutlass", "xmma", "splitk")),
    ("triton (fused)", ("triton",)),
)


def kind_of(name: str) -> str:
    """The kind of a kernel, from its name."""
    lowered = name.lower()
    return next((kind for kind, keys in KINDS if any(k in lowered for k in keys)), "other")


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


class PhaseRanges:
    """Profiler ranges named after the decoder's phases (its `observe` calls) and the vision encoder (hooks)."""

    def __init__(self, visual: torch.nn.Module) -> None:
        self.open: Any = None
        self.vision: Any = None
        self.hooks = [
            visual.register_forward_pre_hook(lambda *_: self._enter_vision()),
            visual.register_forward_hook(lambda *_: self._exit_vision()),
        ]

    def __call__(self, phase: str) -> None:
        if self.open is not None:
            self.open.__exit__(None, None, None)
            self.open = None
        if phase != "done":
            self.open = torch.profiler.record_function(f"phase:{phase}")
            self.open.__enter__()

    def _enter_vision(self) -> None:
        self.vision = torch.profiler.record_function("phase:vision")
        self.vision.__enter__()

    def _exit_vision(self) -> None:
        self.vision.__exit__(None, None, None)

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()


def is_annotation(event: Any) -> bool:
    """A profiler range shown on the GPU timeline (not a kernel)."""
    return bool(getattr(event, "is_user_annotation", False)) or event.name.startswith("phase:")


def innermost_segments(spans: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Nested (start, end, name) spans as non-overlapping segments, each named after its innermost span."""
    segments: list[tuple[float, float, str]] = []
    stack: list[tuple[float, float, str]] = []
    cursor = None
    for start, end, name in sorted(spans, key=lambda span: (span[0], -span[1])):
        while stack and stack[-1][1] <= start:  # close the spans that end before this one starts
            closed = stack.pop()
            segments.append((cursor, closed[1], closed[2]))
            cursor = closed[1]
        if stack and cursor is not None and cursor < start:
            segments.append((cursor, start, stack[-1][2]))
        stack.append((start, end, name))
        cursor = start
    while stack:
        closed = stack.pop()
        segments.append((cursor, closed[1], closed[2]))
        cursor = closed[1]
    return [segment for segment in segments if segment[1] > segment[0]]


def profile_plan(engine: Any, conversations: list, config: Any) -> dict[str, Any]:
    """One plan under the profiler: per phase the host wall ms, and the kernels starting in it by kind."""
    ranges = PhaseRanges(engine.model.model.visual)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    try:
        with torch.profiler.profile(activities=activities) as prof, torch.profiler.record_function("phase:plan"):
            engine.generate_conversations(conversations, config, observe=ranges)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
    finally:
        ranges.remove()
    events = prof.events()
    cpu = torch.autograd.DeviceType.CPU
    spans = [
        (e.time_range.start, e.time_range.end, e.name.removeprefix("phase:"))
        for e in events
        if e.name.startswith("phase:") and e.device_type == cpu  # the GPU copies of the ranges are not phases
    ]
    phases: dict[str, dict[str, Any]] = {}

    def entry_of(name: str) -> dict[str, Any]:
        return phases.setdefault(name, {"count": 0, "wall_ms": 0.0, "gpu_ms": 0.0, "kernels": 0, "by_kind_ms": {}})

    for start, end, name in sorted(spans):
        entry_of(name)["count"] += 1
        entry_of(name)["wall_ms"] += (end - start) / 1000
    segments = innermost_segments(spans)
    starts = [segment[0] for segment in segments]
    for event in events:
        if event.device_type != torch.autograd.DeviceType.CUDA or is_annotation(event):
            continue
        index = bisect.bisect_right(starts, event.time_range.start) - 1
        inside = index >= 0 and event.time_range.start <= segments[index][1]
        entry = entry_of(segments[index][2] if inside else "outside the plan")
        entry["kernels"] += 1
        entry["gpu_ms"] += event.device_time_total / 1000
        kind = kind_of(event.name)
        entry["by_kind_ms"][kind] = entry["by_kind_ms"].get(kind, 0.0) + event.device_time_total / 1000
    return phases


def print_plan(name: str, phases: dict[str, Any]) -> None:
    print(f"== {name}: one plan by phase; wall ms nest (plan > prefill > vision), kernels go to the innermost")
    for phase, entry in phases.items():
        kinds = ", ".join(f"{k} {ms:.1f}" for k, ms in sorted(entry["by_kind_ms"].items(), key=lambda i: -i[1]))
        print(
            f"   {phase:<15} x{entry['count']:<4} wall {entry['wall_ms']:9.2f} ms  GPU {entry['gpu_ms']:9.2f} ms"
            f"  {entry['kernels']:>6} kernels  {kinds}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(prog="wam-diff2-bench profile-gpu-step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--replays", type=int, default=50)
    args = parser.parse_args(argv)
    settings = settings_from(args)
    engine = load_engine(settings)
    conversations, base = workload(settings)
    model = engine.backbone.model
    products = [m for m in model.model.language_model.layers.modules() if isinstance(m, torch.nn.Linear)]
    results: dict[str, Any] = {
        "step_graphs": {},
        "plan_phases": {},
        # what a step's matrix products read: the text layers' and the output layer's weights
        "product_weight_mb": sum(m.weight.nbytes for m in [*products, model.lm_head]) / 2**20,
        "text_layers": len(model.model.language_model.layers),
    }
    for name in settings.engine:
        config = engine_config(base, name).with_overrides(cuda_graphs=True)
        for _ in range(2):  # capture, then a plain run
            engine.generate_conversations(conversations, config)
        results["plan_phases"][name] = phases = profile_plan(engine, conversations, config)
        print_plan(name, phases)
        fast_runner = engine.runners.select(config.engine, config.cuda_graphs)
        store = getattr(fast_runner, "graphs", None)
        entries = list(store.graphs.values()) if store else []
        if not entries:
            print(f"{name}: no captured step graph (not CUDA, or the capture failed)")
            continue
        results["step_graphs"][name] = figures = profile_graph(entries[-1]["graph"], args.replays)
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
