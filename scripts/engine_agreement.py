"""Exact vs fast engine on varied planning prompts: identical sequences / total, per fast-engine variant.

For bfloat16 on a GPU, where identical tokens are measured rather than asserted (README, issue 9). Each prompt
has its own noise image, command, velocity and acceleration; each is decoded alone (batch 1) by the exact
engine, the fast engine without CUDA graphs and, on CUDA, with them and with its fused kernels (`torch_compile`, not
bit-identical; `--compiled` adds them on other devices). Prints the counts, the first differing
position of each disagreement and how far apart the two plans' waypoints are (the largest distance between
corresponding waypoints, metres), and writes them to --json.

    python scripts/engine_agreement.py --model demo --device cuda --dtype bfloat16 --prompts 24
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from wam_diff2_ros.core.decoding import DecodeConfig
from wam_diff2_ros.core.engine import Engine
from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.core.prompts import build_messages, build_planning_prompt
from wam_diff2_ros.demo import resolve_model

COMMANDS = ("straight", "left", "right")


def waypoint_gap(text: str, other: str) -> float | None:
    """The largest distance (m) between corresponding waypoints of two planning answers; None if one is invalid."""
    plans = [parse_waypoints(t, check_kinematics=False) for t in (text, other)]
    if not all(p.valid for p in plans):
        return None
    pairs = zip(plans[0].waypoints, plans[1].waypoints, strict=True)
    return max(((a.x - b.x) ** 2 + (a.y - b.y) ** 2) ** 0.5 for a, b in pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--compiled", action="store_true", help="also the fused kernels off CUDA")
    parser.add_argument(
        "--yardstick-dtype",
        default=None,
        help="also the exact engine in this dtype (e.g. float32): how far plans move with the rounding alone",
    )
    args = parser.parse_args()

    engine = Engine.load(resolve_model(args.model), device=args.device, dtype=args.dtype)
    engines = {}
    variants: dict[str, dict] = {"fast (no graphs)": {"engine": "fast", "cuda_graphs": False}}
    if engine.device.type == "cuda":
        variants["fast (CUDA graphs)"] = {"engine": "fast", "cuda_graphs": True}
    if engine.device.type == "cuda" or args.compiled:
        variants["fast-compiled"] = {"engine": "fast", "cuda_graphs": True, "torch_compile": True}
    if args.yardstick_dtype:
        name = f"exact ({args.yardstick_dtype})"
        engines[name] = Engine.load(resolve_model(args.model), device=args.device, dtype=args.yardstick_dtype)
        variants[name] = {"engine": "exact"}
    rng = np.random.default_rng(7)
    counts = {name: {"identical": 0, "same_steps": 0, "differences": []} for name in variants}
    for index in range(args.prompts):
        frame = rng.integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)
        velocity = (float(rng.uniform(0, 15)), float(rng.uniform(-0.5, 0.5)))
        acceleration = (float(rng.uniform(-2, 2)), float(rng.uniform(-0.5, 0.5)))
        prompt = build_planning_prompt(COMMANDS[index % 3], velocity, acceleration)
        chat = [build_messages(prompt, [frame])]
        exact = engine.generate_conversations(chat, DecodeConfig(engine="exact"))[0]
        for name, overrides in variants.items():
            fast = engines.get(name, engine).generate_conversations(chat, DecodeConfig(**overrides))[0]
            entry = counts[name]
            entry["identical"] += fast.sequence == exact.sequence
            entry["same_steps"] += fast.steps_per_block == exact.steps_per_block
            if fast.sequence != exact.sequence:
                first = next(i for i, (a, b) in enumerate(zip(fast.sequence, exact.sequence, strict=True)) if a != b)
                gap = waypoint_gap(fast.text, exact.text)
                entry["differences"].append({"prompt": index, "first_position": first, "waypoint_gap_m": gap})
    print(f"model {args.model} on {engine.device} ({args.dtype}), {args.prompts} planning prompts, default decoding")
    for name, entry in counts.items():
        firsts = [d["first_position"] for d in entry["differences"]]
        gaps = sorted(d["waypoint_gap_m"] for d in entry["differences"] if d["waypoint_gap_m"] is not None)
        print(
            f"{name:<20} identical sequences {entry['identical']}/{args.prompts}, same steps per block "
            f"{entry['same_steps']}/{args.prompts}" + (f", first differing positions {firsts}" if firsts else "")
        )
        if firsts:
            invalid = len(firsts) - len(gaps)
            spread = f"median {gaps[len(gaps) // 2]:.3f} m, max {gaps[-1]:.3f} m" if gaps else "none comparable"
            print(f"{'':<20} differing plans: largest waypoint distance {spread}; {invalid} not both valid")
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "dtype": args.dtype, "prompts": args.prompts,
                                         "device": str(engine.device), "variants": counts}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
