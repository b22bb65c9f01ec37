"""`wam-diff2-bench`: measure the decoder stage by stage on a checkpoint (or a random 2B model) and print figures.

`wam-diff2-bench [flags]` compares engines on the benchmark's workload (`wam_diff2_ros.bench.runs`);
`wam-diff2-bench SUBCOMMAND [flags]` runs one of the other measurements (`SUBCOMMANDS`; `--help` after a
subcommand lists its flags); `--end-to-end` and `--preprocessing` are spellings of the `end-to-end` and
`preprocess-device` subcommands, and `--candidates N` runs the `candidates` subcommand. Flags are kebab-case; the
underscore spellings of earlier releases are still accepted (hidden aliases). Decoding flags left out take
`DecodeConfig`'s defaults.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from wam_diff2_ros.bench import print_figures, run
from wam_diff2_ros.bench.flags import build_parser as _build_parser
from wam_diff2_ros.bench.flags import settings_from

#: subcommand -> the module (in wam_diff2_ros.bench) whose `main(argv)` runs it
SUBCOMMANDS = {
    "end-to-end": "end_to_end",  # whole plans: an Image message to the Path through the node's runtime
    "agreement": "agreement",  # the yardstick that admits a non-identical engine
    "profile-gpu-step": "profile_gpu_step",  # a captured step's kernels by kind, a plan's GPU time by phase
    "profile-cpu-step": "profile_cpu_step",  # a CPU step's parts against the GEMM rate
    "probe-gpu-kernels": "probe_gpu_kernels",  # a step's products and attention by variant
    "cpu-kernels": "cpu_kernel_bench",  # the CPU kernels against the stock modules, with a bit check
    "preprocess": "preprocess_bench",  # one camera frame's preprocessing
    "preprocess-device": "preprocessing",  # host vs device preprocessing: pixel values, host time per frame
    "conversions": "conversions_bench",  # image message conversions per encoding (needs rclpy)
    "rows": "gpu_rows",  # exact / fast / fused side by side from one scripts/bench_gpu.sh run
    "candidates": "candidates_bench",  # candidate plans: one batch vs one decode after another, per N
}
#: flags of the plain command that run a subcommand instead (the spellings the documents use)
FLAG_SUBCOMMANDS = {"--end-to-end": "end-to-end", "--preprocessing": "preprocess-device"}


def build_parser() -> argparse.ArgumentParser:
    """The default measurement's flags."""
    return _build_parser(description=__doc__.split("\n\n")[0])


def _subcommand(argv: list[str]) -> tuple[str, list[str]] | None:
    if argv and argv[0] in SUBCOMMANDS:
        return argv[0], argv[1:]
    for flag, name in FLAG_SUBCOMMANDS.items():
        if flag in argv:
            return name, [a for a in argv if a != flag]
    if any(a == "--candidates" or a.startswith("--candidates=") for a in argv):  # the flag is the subcommand's own
        return "candidates", argv
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code. A first argument naming a subcommand runs it with the rest."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = _subcommand(argv)
    if chosen is not None:
        name, rest = chosen
        return importlib.import_module(f"wam_diff2_ros.bench.{SUBCOMMANDS[name]}").main(rest)
    args = build_parser().parse_args(argv)
    if args.iterations < 1 or args.warmup < 0 or args.cameras < 1 or args.batch < 1:
        print(
            "wam-diff2-bench: error: need --iterations >= 1, --warmup >= 0, --cameras >= 1, --batch >= 1",
            file=sys.stderr,
        )
        return 2
    try:
        figures = run(settings_from(args))
    except Exception as exc:
        print(f"wam-diff2-bench: error: {exc}", file=sys.stderr)
        return 1
    print_figures(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
