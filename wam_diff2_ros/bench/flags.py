"""`wam-diff2-bench`'s measurement flags, shared by its subcommands that measure the benchmark's workload.

Flags are kebab-case like the other CLIs; the underscore spellings of earlier releases (`--model_id`,
`--max_new_tokens`, ...) are still accepted (hidden aliases). Decoding flags left out take `DecodeConfig`'s
defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from wam_diff2_ros.bench.runs import ENGINE_CHOICES, FUSED, BenchSettings

_DEFAULTS = BenchSettings()


def _add(parser: argparse.ArgumentParser, flag: str, **kwargs: Any) -> None:
    """A kebab-case flag; its old underscore spelling (if different) is a hidden alias."""
    parser.add_argument(flag, **kwargs)
    old = "--" + flag[2:].replace("-", "_")
    if old != flag:
        alias = {k: v for k, v in kwargs.items() if k not in ("help", "default")}
        parser.add_argument(
            old, dest=flag[2:].replace("-", "_"), help=argparse.SUPPRESS, default=argparse.SUPPRESS, **alias
        )


def build_parser(prog: str = "wam-diff2-bench", description: str | None = None) -> argparse.ArgumentParser:
    """Command-line flags (decoding defaults: `DecodeConfig`'s, filled in by the run)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
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
        help=f"decoding engine; repeat to compare engines on the same inputs (default: auto); {FUSED}: the "
        f"fast engine with fused step kernels (not bit-identical)",
    )
    _add(parser, "--no-cuda-graphs", action="store_true", help="fast engine on CUDA without graphs")
    _add(parser, "--max-new-tokens", type=int, default=None)
    _add(parser, "--block-size", type=int, default=None)
    _add(parser, "--denoising-steps", type=int, default=None)
    _add(parser, "--remasking-strategy", default=None)
    _add(parser, "--confidence-threshold", type=float, default=None)
    _add(parser, "--deadline-ms", type=float, default=None, help="decoding deadline per call from its start; 0 = none")
    _add(parser, "--warmup", type=int, default=d.warmup)
    _add(parser, "--iterations", type=int, default=d.iterations)
    _add(parser, "--no-counters", action="store_true", help="skip the counted run (host reads, aten ops)")
    _add(parser, "--json", type=Path, default=None, help="also write the figures to this JSON file")
    return parser


def settings_from(args: argparse.Namespace) -> BenchSettings:
    """The library's settings from parsed flags."""
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(BenchSettings) if f.name != "engine"}
    return BenchSettings(**fields, engine=tuple(args.engine or _DEFAULTS.engine))
