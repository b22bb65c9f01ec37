"""`wam-diff2-bench`: measure the decoder stage by stage on a checkpoint (or a random 2B model) and print figures.

`wam-diff2-bench [flags]` compares engines on the benchmark's workload (`wam_diff2_ros.bench.runs`);
`wam-diff2-bench SUBCOMMAND [flags]` runs one of the other measurements (`SUBCOMMANDS`; `--help` after a
subcommand lists its flags; `--help` lists the subcommands); `--end-to-end` and `--preprocessing` are spellings of
the `end-to-end` and `preprocess` subcommands, and `--candidates N` runs the `candidates` subcommand. Flags are
kebab-case; the underscore spellings of earlier releases are still accepted (hidden aliases). Decoding flags left
out take `DecodeConfig`'s defaults.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from wam_diff2_ros.bench import print_figures, run
from wam_diff2_ros.bench.flags import build_parser as _build_parser
from wam_diff2_ros.bench.flags import settings_from
from wam_diff2_ros.cli import toolkit

#: subcommand -> what it measures; each runs `main(argv)` of the module of its name in wam_diff2_ros.bench
#: (dashes as underscores)
SUBCOMMANDS = {
    "end-to-end": "whole plans: an Image message to the Path through the node's runtime",
    "agreement": "the yardstick that admits a non-identical engine (exact vs fast vs fused plans)",
    "profile-gpu-step": "a captured step's kernels by kind, a plan's GPU time by phase",
    "profile-cpu-step": "a CPU step's parts against the GEMM rate",
    "probe-gpu-kernels": "a step's products and attention by variant",
    "cpu-kernels": "the CPU kernels against the stock modules, with a bit check",
    "preprocess": "a camera frame's preprocessing: host vs device pixel values and times (--previous FILE)",
    "conversions": "image message conversions per encoding (needs rclpy)",
    "rows": "exact / fast / fused side by side from one scripts/bench_gpu.sh run",
    "flood": "the node's decoding deadline while flooded with camera images (real node, real DDS)",
    "viewer": "what the live view costs the planning thread, and its memory with a stalled client",
    "candidates": "candidate plans: one batch after one shared prefill vs one decode after another, per N",
}
#: flags of the plain command that run a subcommand instead (the spellings the documents use)
FLAG_SUBCOMMANDS = {"--end-to-end": "end-to-end", "--preprocessing": "preprocess"}


def build_parser() -> argparse.ArgumentParser:
    """The default measurement's flags; `--help` lists the subcommands too."""
    parser = _build_parser(description=__doc__.split("\n\n")[0], kind=toolkit.Parser)
    width = max(map(len, SUBCOMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {what}" for name, what in SUBCOMMANDS.items())
    parser.epilog = f"subcommands (wam-diff2-bench SUBCOMMAND --help for their flags):\n{listing}"
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _subcommand(argv: list[str]) -> tuple[str, list[str]] | None:
    if argv and argv[0] in SUBCOMMANDS:
        return argv[0], argv[1:]
    if any(a == "--candidates" or a.startswith("--candidates=") for a in argv):  # the flag is the subcommand's own
        return "candidates", argv
    for flag, name in FLAG_SUBCOMMANDS.items():
        if flag in argv:
            return name, [a for a in argv if a != flag]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code. A first argument naming a subcommand runs it with the rest."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = _subcommand(argv)
    if chosen is not None:
        name, rest = chosen
        return importlib.import_module(f"wam_diff2_ros.bench.{name.replace('-', '_')}").main(rest)
    parser = build_parser()
    args = toolkit.parse(parser, argv)
    if isinstance(args, int):
        return args
    problems = toolkit.below_minimum(args, iterations=1, warmup=0, cameras=1, batch=1)
    if (refused := toolkit.refuse(parser.prog, problems)) is not None:
        return refused
    try:
        figures = run(settings_from(args))
    except Exception as exc:
        toolkit.error(parser.prog, exc)
        return toolkit.EXIT_FAILED
    print_figures(figures)
    toolkit.write_json(args.json, figures)
    return toolkit.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
