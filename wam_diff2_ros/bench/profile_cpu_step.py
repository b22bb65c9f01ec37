"""Where a fast-engine CPU denoising step goes, and how close its matrix products run to this CPU's GEMM rate.

Decodes the benchmark's workload with the fast engine (`--plans` timed plans after one warm-up) and times its
parts: the text layers (`step_hidden`, with the CPU kernels; step and commit forwards), the output layer on the
still-masked rows (`row_logits`; without its float32 kernel all rows run through `lm_head`, untimed, and the
part counts no products), sampling and the remasking selection. For the layers and the output layer it
counts the multiply-adds of their products (the layers: the projections only, so attention, norms and rotary
are in the time but not in the count) and sets their rate against MKL's on one large float32 product (2048³)
in the same process. A part near that rate is bound by arithmetic: only fewer products make it faster.
Milliseconds per step are a part's time over the plans divided by their denoising steps (the layers' time
includes the commit forwards).
Takes `wam-diff2-bench`'s flags; set OMP_NUM_THREADS and compare within one run:

    OMP_NUM_THREADS=2 wam-diff2-bench profile-cpu-step --random-2b --text-layers 4 --vision-layers 2 \
        --device cpu --dtype float32 --width 640 --height 360 --max-new-tokens 32 --json cpu_step.json
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from wam_diff2_ros.bench.flags import build_parser, settings_from
from wam_diff2_ros.bench.runs import engine_config, load_engine, workload
from wam_diff2_ros.bench.timing import host_ms
from wam_diff2_ros.core.engine import decoding, fast
from wam_diff2_ros.core.engine.cpu_kernels import kernel_paths, live_rows
from wam_diff2_ros.core.model import BlockDiffusionBackbone

PEAK_SIZE = 2048  # the reference product: PEAK_SIZE³ float32


@contextlib.contextmanager
def timed(parts: dict[str, dict[str, float]], owner: Any, name: str, label: str, flops: Any = None) -> Iterator[None]:
    """Within: every call of `owner.name` adds its wall seconds (and `flops(args)`) to `parts[label]`."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = original(*args, **kwargs)
        entry = parts[label]
        entry["seconds"] += time.perf_counter() - started
        entry["calls"] += 1
        entry["flops"] += flops(args) if flops and result is not None else 0.0  # None: computed elsewhere
        return result

    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


def projection_weights(engine: Any) -> int:
    """Weights of the text layers' linear projections (q, k, v, o, gate, up, down of every layer)."""
    layers = engine.backbone.model.model.language_model.layers
    return sum(m.weight.numel() for m in layers.modules() if isinstance(m, torch.nn.Linear))


def gemm_gflops() -> float:
    """MKL's float32 rate on one large product, GFLOP/s (median of 5)."""
    a, b = torch.randn(PEAK_SIZE, PEAK_SIZE), torch.randn(PEAK_SIZE, PEAK_SIZE)
    median, _ = host_ms(lambda: a @ b, 5)
    return 2 * PEAK_SIZE**3 / (median / 1e3) / 1e9


def profile(engine: Any, conversations: list, config: Any, plans: int) -> dict[str, Any]:
    """Per part: calls, ms per denoising step, GFLOP and GFLOP/s over `plans` plans."""
    weights = projection_weights(engine)
    head = engine.backbone.model.lm_head.weight
    live = live_rows(head.detach())  # the kernel computes only the rows that are not all zero (the demo's 84)
    head_products = head.numel() if live is None else live.numel() * head.shape[1]
    parts: dict[str, dict[str, float]] = defaultdict(lambda: {"seconds": 0.0, "calls": 0, "flops": 0.0})
    with contextlib.ExitStack() as stack:
        hooks = (
            (BlockDiffusionBackbone, "step_hidden", "layers", lambda args: 2.0 * args[1].numel() * weights),
            (
                fast.FastRunner,
                "row_logits",
                "output layer",
                lambda args: 2.0 * args[1].shape[0] * head_products,
            ),
            (fast, "sample_tokens", "sampling", None),
            (decoding, "select_transfers", "remasking selection", None),
        )
        for owner, name, label, flops in hooks:
            stack.enter_context(timed(parts, owner, name, label, flops))
        steps, started = 0, time.perf_counter()
        for _ in range(plans):
            first = engine.generate_conversations(conversations, config)[0]  # a batch's samples share the steps
            steps += sum(first.steps_per_block)
        wall = time.perf_counter() - started
    figures: dict[str, Any] = {"plans": plans, "steps": steps, "plan_ms": wall / plans * 1e3}
    for label, entry in parts.items():
        figures[label] = {
            "calls": int(entry["calls"]),
            "ms_per_step": entry["seconds"] / steps * 1e3,
            "gflop": entry["flops"] / 1e9,
            "gflops_per_s": entry["flops"] / entry["seconds"] / 1e9 if entry["flops"] else None,
        }
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(prog="wam-diff2-bench profile-cpu-step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=1, help="timed plans after one warm-up plan")
    args = parser.parse_args(argv)
    settings = settings_from(args)
    engine = load_engine(settings)
    if engine.backbone.device.type != "cpu":
        print("wam-diff2-bench profile-cpu-step profiles the CPU engine; use --device cpu", file=sys.stderr)
        return 2
    conversations, base = workload(settings)
    config = engine_config(base, "fast")
    engine.generate_conversations(conversations, config)  # warm-up: kernel probes, packed weights
    figures = profile(engine, conversations, config, args.plans)
    figures["gemm_gflops_per_s"] = peak = gemm_gflops()
    figures["threads"] = torch.get_num_threads()
    figures["cpu_kernel_paths"] = kernel_paths()  # per shape: the kernel, or the stock layer (its probe's verdict)
    print(f"fast engine, {figures['steps']} denoising steps in {args.plans} plan(s), {figures['threads']} threads")
    for label in ("layers", "output layer", "sampling", "remasking selection"):
        entry = figures.get(label)
        if entry is None:
            continue
        rate = entry["gflops_per_s"]
        share = f"{rate:7.1f} GFLOP/s ({rate / peak:.0%} of the GEMM rate)" if rate else ""
        print(f"{label:<20} {entry['ms_per_step']:8.2f} ms/step {entry['calls']:5d} calls {share}")
    print(f"MKL float32 {PEAK_SIZE}³ product: {peak:.1f} GFLOP/s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0
