"""Where a fast-engine denoising step's time goes on CUDA: the captured forward alone vs the whole step.

Builds the random-weight 2B model as `wam-diff2-bench --random-2b` does, decodes one planning prompt with the
fast engine (CUDA graphs) to capture the step, then times (CUDA events, after warm-up) the graph replay alone,
the eager rest of a step (sampling + remasking + the "anything masked?" read), and the whole decode, and
prints the profiler's top CUDA kernels of one decode.

    python scripts/profile_gpu_step.py [--text-layers N] [--max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from wam_diff2_ros.bench.runs import BenchSettings, load_engine
from wam_diff2_ros.core.decoding import DecodeConfig, sample_tokens, select_transfers
from wam_diff2_ros.core.prompts import build_messages, build_planning_prompt


def cuda_ms(function, repeats: int = 50) -> float:
    """Mean milliseconds of `function()` on the current stream (CUDA events, 5 warm-up calls)."""
    for _ in range(5):
        function()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        function()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text-layers", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    args = parser.parse_args()
    settings = BenchSettings(random_2b=True, text_layers=args.text_layers, device="cuda", dtype="bfloat16")
    engine = load_engine(settings)
    frame = np.random.default_rng(0).integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)
    chat = [build_messages(build_planning_prompt("straight", (6.0, 0.0), (0.3, 0.0)), [frame])]
    config = DecodeConfig(max_new_tokens=args.max_new_tokens, engine="fast")
    for _ in range(2):
        result = engine.generate_conversations(chat, config)[0]
    steps = sum(result.steps_per_block)
    store = engine.backbone._cuda_graph_steps
    if not store.enabled or not store.graphs:
        print("no CUDA graph was captured")
        return 1
    entry = next(iter(store.graphs.values()))
    replay_ms = cuda_ms(entry["graph"].replay)
    logits = entry["logits"]
    length = logits.shape[1]
    masked = torch.ones(1, length, dtype=torch.bool, device=logits.device)
    tokens = torch.zeros(1, length, dtype=torch.long, device=logits.device)
    finished = torch.zeros(1, dtype=torch.bool, device=logits.device)

    def rest_of_step() -> None:
        if not masked.any():  # the step's device->host read
            return
        proposal, confidence = sample_tokens(logits)
        transfer = select_transfers("low_confidence_dynamic", masked, confidence, 1, 0.9, finished)
        torch.where(transfer, proposal, tokens)

    rest_ms = cuda_ms(rest_of_step)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        result = engine.generate_conversations(chat, config)[0]
        torch.cuda.synchronize()
    timing = result.timing
    print(
        f"2B bf16 ({args.text_layers or 28} text layers), prompt {result.num_prompt_tokens} tokens, "
        f"{steps} denoising steps in {len(result.steps_per_block)} block(s)"
    )
    print(f"graph replay (block forward + output layer): {replay_ms:.3f} ms")
    print(f"eager rest of a step (read + greedy sampling + remasking): {rest_ms:.3f} ms")
    print(f"denoise per step in a decode: {timing.denoise_s * 1000 / max(1, steps):.3f} ms")
    kernels = [e for e in prof.key_averages() if getattr(e, "device_time_total", 0) > 0]
    kernels.sort(key=lambda e: e.device_time_total, reverse=True)
    total = sum(e.device_time_total for e in kernels)
    print(f"CUDA kernel time in one decode: {total / 1000:.1f} ms; top kernels:")
    for event in kernels[:20]:
        print(f"  {event.device_time_total / 1000:9.2f} ms {event.count:6d}x  {event.key[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
