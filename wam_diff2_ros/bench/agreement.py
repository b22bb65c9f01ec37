"""`wam-diff2-bench agreement`: the yardstick that admits an engine whose tokens are not the exact engine's.

On varied planning prompts (image sizes, every navigation command, speeds 0-20 m/s, seeded noise images) each
model decodes with the exact engine in float32 (the yardstick), with the exact engine in the candidate dtype
(bfloat16 by default: the rounding every bf16 engine pays), and with each candidate engine in that dtype. Per
engine against the yardstick: identical sequences, the distance of its plan to the yardstick's (the mean distance
between corresponding waypoints, metres, over prompts where both plans are valid: median, p95, max), the rate of
valid plans, and the fraction of response positions whose token differs (for models whose answers are no plans,
e.g. the tiny random checkpoints). An engine is admitted when, on every model, its median and p95 distance are
within 10 % of exact-bf16's (or 1 cm, whichever is larger), its valid rate is not lower, and its differing-token
fraction is within 10 % of exact-bf16's (or 0.01). The report is written as JSON (`--json`); `--admit` also writes
it where `auto` reads verdicts (`engine_admission.json` in the user's cache, core/cache.py). Decoding:
`DecodeConfig`'s defaults.

    wam-diff2-bench agreement --model demo --model tiny --device cuda --prompts 48 --json agreement.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

COMMANDS = ("left", "straight", "right", "unknown")
SIZES = ((640, 360), (320, 180), (960, 540), (480, 480))
MAX_SPEED = 20.0  # m/s: prompts' speeds spread over [0, MAX_SPEED]
TOLERANCE = 0.10  # admitted: within 10 % of exact-bf16's figures ...
DISTANCE_FLOOR_M = 0.01  # ... or this much, whichever is larger
TOKEN_FLOOR = 0.01
YARDSTICK = "exact (float32)"


def planning_prompts(count: int, sizes: Sequence[tuple[int, int]] = SIZES, seed: int = 7) -> list[dict[str, Any]]:
    """`count` varied prompts: image size, command, speed (0 to MAX_SPEED), acceleration and noise-image seed."""
    rng = np.random.default_rng(seed)
    prompts = []
    for index in range(count):
        speed = MAX_SPEED * index / max(1, count - 1)
        prompts.append(
            {
                "size": tuple(sizes[index % len(sizes)]),
                "command": COMMANDS[index % len(COMMANDS)],
                "velocity": (round(speed, 2), round(float(rng.uniform(-0.3, 0.3)), 2)),
                "acceleration": (round(float(rng.uniform(-2, 2)), 2), round(float(rng.uniform(-0.5, 0.5)), 2)),
                "image_seed": int(rng.integers(0, 2**31)),
            }
        )
    return prompts


def conversation(prompt: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat of one prompt (its seeded noise frame)."""
    from wam_diff2_ros.core.prompts import build_messages, build_planning_prompt

    width, height = prompt["size"]
    frame = np.random.default_rng(prompt["image_seed"]).integers(0, 256, (height, width, 3), dtype=np.uint8)
    text = build_planning_prompt(prompt["command"], prompt["velocity"], prompt["acceleration"])
    return build_messages(text, [frame])


def plan_distance(text: str, reference: str) -> float | None:
    """Mean distance (m) between corresponding waypoints of two answers; None unless both are valid plans."""
    from wam_diff2_ros.core.parsing import parse_waypoints

    plans = [parse_waypoints(t) for t in (text, reference)]
    if not all(p.valid for p in plans):
        return None
    pairs = zip(plans[0].waypoints, plans[1].waypoints, strict=True)
    return float(np.mean([((a.x - b.x) ** 2 + (a.y - b.y) ** 2) ** 0.5 for a, b in pairs]))


def is_valid(text: str) -> bool:
    """Whether an answer parses as a valid plan (the node's gate)."""
    from wam_diff2_ros.core.parsing import parse_waypoints

    return parse_waypoints(text).valid


def summarise(answers: list[Any], yardstick: list[Any]) -> dict[str, Any]:
    """An engine's figures against the yardstick's answers (same prompts, same order)."""
    distances = sorted(
        d for a, y in zip(answers, yardstick, strict=True) if (d := plan_distance(a.text, y.text)) is not None
    )
    differing = [
        sum(p != q for p, q in zip(a.sequence, y.sequence, strict=True)) / max(1, len(y.sequence))
        for a, y in zip(answers, yardstick, strict=True)
    ]
    count = len(answers)

    def quantile(q: float) -> float | None:
        return float(np.percentile(distances, q)) if distances else None

    return {
        "identical": sum(a.sequence == y.sequence for a, y in zip(answers, yardstick, strict=True)) / count,
        "distance_m": {"median": quantile(50), "p95": quantile(95), "max": distances[-1] if distances else None},
        "compared_plans": len(distances),
        "valid_rate": sum(is_valid(a.text) for a in answers) / count,
        "differing_tokens": float(np.mean(differing)),
    }


def verdict(candidate: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """Why `candidate` (an engine's summary) is not admitted against `reference` (exact-bf16's); empty: admitted."""
    reasons = []
    for key in ("median", "p95"):
        got, limit = candidate["distance_m"][key], reference["distance_m"][key]
        if limit is None:
            continue  # no valid plan pairs for exact-bf16: nothing to compare with (e.g. random weights)
        bound = max(limit * (1 + TOLERANCE), limit + DISTANCE_FLOOR_M)
        if got is None or got > bound:
            reasons.append(f"{key} distance {got} m > {bound:.4f} m")
    if candidate["valid_rate"] < reference["valid_rate"]:
        reasons.append(f"valid rate {candidate['valid_rate']:.3f} < exact-bf16's {reference['valid_rate']:.3f}")
    bound = max(reference["differing_tokens"] * (1 + TOLERANCE), reference["differing_tokens"] + TOKEN_FLOOR)
    if candidate["differing_tokens"] > bound:
        reasons.append(f"differing tokens {candidate['differing_tokens']:.4f} > {bound:.4f}")
    return reasons


def measure_model(model: str, args: argparse.Namespace, prompts: list[dict[str, Any]]) -> dict[str, Any]:
    """Every engine's figures on one model."""
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.core.engine.decoding import DecodeConfig
    from wam_diff2_ros.demo import resolve_model

    chats = [[conversation(p)] for p in prompts]
    path = resolve_model(model)
    yardstick_engine = Engine.load(path, device=args.device, dtype=args.yardstick_dtype)
    yardstick = [yardstick_engine.generate_conversations(c, DecodeConfig(engine="exact"))[0] for c in chats]
    yardstick_engine.close()
    engine = Engine.load(path, device=args.device, dtype=args.dtype)
    engines: dict[str, Any] = {}
    for name in dict.fromkeys(["exact", *args.candidate]):
        answers = [engine.generate_conversations(c, DecodeConfig(engine=name))[0] for c in chats]
        engines[name] = summarise(answers, yardstick)
    engine.close()
    reference = engines["exact"]
    for name, figures in engines.items():
        if name != "exact":
            figures["not_admitted_because"] = verdict(figures, reference)
    return {"yardstick_valid_rate": sum(is_valid(y.text) for y in yardstick) / len(yardstick), "engines": engines}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The report: per model every engine's figures, and the verdict per candidate over all models."""
    import torch

    from wam_diff2_ros.core.checkpoint import resolve_device

    prompts = planning_prompts(args.prompts, [tuple(int(v) for v in s.split("x")) for s in args.size] or SIZES)
    models = {model: measure_model(model, args, prompts) for model in args.model}
    verdicts = {}
    for name in args.candidate:
        if name == "exact":
            continue
        reasons = [
            f"{m}: {r}" for m, figures in models.items() for r in figures["engines"][name]["not_admitted_because"]
        ]
        verdicts[name] = {"admitted": not reasons, "reasons": reasons}
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "device": resolve_device(args.device).type,
        "dtype": args.dtype,
        "yardstick": f"exact engine in {args.yardstick_dtype}",
        "torch": torch.__version__,
        "prompts": len(prompts),
        "sizes": sorted({f"{w}x{h}" for w, h in (p["size"] for p in prompts)}),
        "models": models,
        "verdicts": verdicts,
    }


def print_report(report: dict[str, Any]) -> None:
    """One line per (model, engine), then the verdicts."""
    print(
        f"agreement on {report['device']} {report['dtype']} against the {report['yardstick']}, "
        f"{report['prompts']} prompts ({', '.join(report['sizes'])})"
    )
    for model, figures in report["models"].items():
        print(f"{model}: yardstick valid rate {figures['yardstick_valid_rate']:.2f}")
        for name, engine in figures["engines"].items():
            d = engine["distance_m"]
            spread = "-" if d["median"] is None else f"{d['median']:.3f} / {d['p95']:.3f} / {d['max']:.3f} m"
            print(
                f"  {name:<8} identical {engine['identical']:.2f}  distance median/p95/max {spread}"
                f" ({engine['compared_plans']} plans)  valid {engine['valid_rate']:.2f}"
                f"  differing tokens {engine['differing_tokens']:.4f}"
            )
    for name, result in report["verdicts"].items():
        print(
            f"{name}: {'ADMITTED' if result['admitted'] else 'not admitted'}"
            + "".join(f"\n  {r}" for r in result["reasons"])
        )


def build_parser() -> argparse.ArgumentParser:
    """The subcommand's flags."""
    from wam_diff2_ros.core.engine.decoding import ENGINES

    parser = argparse.ArgumentParser(prog="wam-diff2-bench agreement", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", action="append", help="'demo', 'tiny' or a checkpoint dir (repeat; default demo, tiny)"
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="bfloat16", help="the candidates' dtype (and exact's, the reference)")
    parser.add_argument("--yardstick-dtype", default="float32")
    parser.add_argument(
        "--candidate", action="append", choices=[e for e in ENGINES if e != "auto"], help="repeat (default fast, fused)"
    )
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument(
        "--size", action="append", default=[], help="WIDTHxHEIGHT, repeat (default 640x360 320x180 960x540 480x480)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    parser.add_argument("--admit", action="store_true", help="also write it where `auto` reads verdicts")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `wam-diff2-bench agreement`; returns the exit code."""
    args = build_parser().parse_args(argv)
    args.model = args.model or ["demo", "tiny"]
    args.candidate = args.candidate or ["fast", "fused"]
    if args.prompts < 1:
        print("wam-diff2-bench agreement: error: need --prompts >= 1", file=sys.stderr)
        return 2
    report = run(args)
    print_report(report)
    text = json.dumps(report, indent=2) + "\n"
    if args.json:
        args.json.write_text(text, encoding="utf-8")
    if args.admit:
        from wam_diff2_ros.core.engine.selection import admission_path

        path = admission_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"verdicts written to {path}")
    return 0
