"""`wam-diff2-bench`: measure the decoder stage by stage on a checkpoint (or a random 2B model) and print figures.

Flags are kebab-case like the other CLIs; the underscore spellings of earlier releases (`--model_id`,
`--max_new_tokens`, ...) are still accepted (hidden aliases). Decoding flags left out take `DecodeConfig`'s
defaults; the work is `wam_diff2_ros.bench`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wam_diff2_ros.bench import BenchSettings, print_figures, run
from wam_diff2_ros.bench.end_to_end import EndToEndSettings, print_end_to_end, run_end_to_end
from wam_diff2_ros.bench.preprocessing import SIZES, compare, print_comparison
from wam_diff2_ros.bench.runs import COMPILED, ENGINE_CHOICES
from wam_diff2_ros.core.device_preprocess import PREPROCESS_MODES

_DEFAULTS = BenchSettings()
_END = EndToEndSettings()


def _add(parser: argparse.ArgumentParser, flag: str, **kwargs: Any) -> None:
    """A kebab-case flag; its old underscore spelling (if different) is a hidden alias."""
    parser.add_argument(flag, **kwargs)
    old = "--" + flag[2:].replace("-", "_")
    if old != flag:
        alias = {k: v for k, v in kwargs.items() if k not in ("help", "default")}
        parser.add_argument(
            old, dest=flag[2:].replace("-", "_"), help=argparse.SUPPRESS, default=argparse.SUPPRESS, **alias
        )


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (decoding defaults: `DecodeConfig`'s, filled in by the run)."""
    # "resolve": scripts that extend this parser (scripts/profile_cpu_step.py) may redefine a flag (--plans)
    parser = argparse.ArgumentParser(
        prog="wam-diff2-bench", description=__doc__.split("\n\n")[0], conflict_handler="resolve"
    )
    d = _DEFAULTS
    _add(parser, "--model-id", default=d.model_id, help="checkpoint dir, 'demo', or 'tiny' (a random tiny model)")
    _add(parser, "--random-2b", action="store_true", help="random weights in the real 2B architecture")
    _add(parser, "--text-layers", type=int, default=d.text_layers, help="with --random-2b: fewer text layers")
    _add(parser, "--vision-layers", type=int, default=d.vision_layers, help="with --random-2b: fewer vision layers")
    _add(parser, "--device", default=d.device)
    _add(parser, "--dtype", default=d.dtype)
    _add(parser, "--width", type=int, default=d.width)
    _add(parser, "--height", type=int, default=d.height)
    _add(parser, "--cameras", type=int, default=d.cameras, help="images per prompt")
    _add(parser, "--batch", type=int, default=d.batch, help="prompts decoded together")
    _add(
        parser,
        "--engine",
        action="append",
        choices=ENGINE_CHOICES,
        default=None,
        help=f"decoding engine; repeat to compare engines on the same inputs (default: auto); {COMPILED}: the "
        "fast engine with fused step kernels (torch_compile; not bit-identical)",
    )
    _add(parser, "--no-cuda-graphs", action="store_true", help="fast engine on CUDA without graphs")
    _add(parser, "--max-new-tokens", type=int, default=None)
    _add(parser, "--block-size", type=int, default=None)
    _add(parser, "--denoising-steps", type=int, default=None)
    _add(parser, "--remasking-strategy", default=None)
    _add(parser, "--confidence-threshold", type=float, default=None)
    _add(parser, "--warmup", type=int, default=d.warmup)
    _add(parser, "--iterations", type=int, default=d.iterations)
    _add(parser, "--no-counters", action="store_true", help="skip the counted run (host reads, aten ops)")
    _add(parser, "--json", type=Path, default=None, help="also write the figures to this JSON file")
    end = parser.add_argument_group("end to end (through the node's runtime: Image message in, Path out)")
    end.add_argument("--end-to-end", action="store_true", help="time whole plans through the node's PlannerRuntime")
    end.add_argument("--plans", type=int, default=_END.plans, help="timed plans per schedule")
    end.add_argument(
        "--steps-per-block",
        type=int,
        action="append",
        default=None,
        help="force exactly N denoising steps per block (the static schedule); 0 = the dynamic default; repeat "
        "to measure several schedules in one run",
    )
    end.add_argument("--blocks", type=int, default=_END.blocks, help="response blocks per plan")
    end.add_argument("--preprocess", choices=PREPROCESS_MODES, default=_END.preprocess, help="model.preprocess")
    parser.add_argument(
        "--preprocessing",
        action="store_true",
        help="compare host and device image preprocessing instead: pixel values (against transformers' image "
        "processor too) and host time per frame of --width x --height (--iterations repeats)",
    )
    return parser


def settings_from(args: argparse.Namespace) -> BenchSettings:
    """The library's settings from parsed flags."""
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(BenchSettings) if f.name != "engine"}
    return BenchSettings(**fields, engine=tuple(args.engine or _DEFAULTS.engine))


def end_to_end_settings(args: argparse.Namespace) -> EndToEndSettings:
    """The end-to-end benchmark's settings from parsed flags (the first --engine; `fast-compiled` is not one)."""
    engine = (args.engine or ["auto"])[0]
    if engine == COMPILED:
        raise ValueError(f"--end-to-end runs the node's decoding engines (exact, fast, auto), not {COMPILED}")
    return EndToEndSettings(
        model_id=args.model_id,
        random_2b=args.random_2b,
        text_layers=args.text_layers,
        vision_layers=args.vision_layers,
        device=args.device,
        dtype=args.dtype,
        width=args.width,
        height=args.height,
        engine=engine,
        no_cuda_graphs=args.no_cuda_graphs,
        preprocess=args.preprocess,
        steps_per_block=tuple(args.steps_per_block or _END.steps_per_block),
        blocks=args.blocks,
        plans=args.plans,
        warmup=args.warmup,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.iterations < 1 or args.warmup < 0 or args.cameras < 1 or args.batch < 1:
        print(
            "wam-diff2-bench: error: need --iterations >= 1, --warmup >= 0, --cameras >= 1, --batch >= 1",
            file=sys.stderr,
        )
        return 2
    if args.preprocessing:
        figures = compare(((args.width, args.height), *SIZES[1:]), repeats=args.iterations)
        print_comparison(figures)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        return 0
    try:
        figures = run_end_to_end(end_to_end_settings(args)) if args.end_to_end else run(settings_from(args))
    except Exception as exc:
        print(f"wam-diff2-bench: error: {exc}", file=sys.stderr)
        return 1
    (print_end_to_end if args.end_to_end else print_figures)(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
