"""``wam-diff2-replay``: argparse → :func:`wam_diff2_ros.replay.replay` → exit code.

Usage, outputs and exit codes: :mod:`wam_diff2_ros.replay`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from wam_diff2_ros.cli import toolkit
from wam_diff2_ros.replay.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, ReplayModelError, ReplayUsageError
from wam_diff2_ros.replay.interrupts import INTERRUPTS
from wam_diff2_ros.replay.loop import replay
from wam_diff2_ros.replay.settings import ReplayOptions, parse_set
from wam_diff2_ros.replay.topics import TopicRequest
from wam_diff2_ros.ros.inputs import INPUTS, InputSpec


def build_parser() -> argparse.ArgumentParser:
    """The ``wam-diff2-replay`` argument parser."""
    parser = toolkit.Parser(
        prog="wam-diff2-replay",
        description="Replay a rosbag2 bag (MCAP or sqlite3) through the WAM-Diff2 node's planning path offline "
        "and evaluate the plans against the ego's actual future from the bag's odometry.",
        epilog="Exit codes: 0 done; 1 model failed; 2 usage / parameters / topics / unreadable bag; 3 bag damaged "
        "or truncated (the readable part was replayed and written); 4 nothing could be planned; 130 interrupted "
        "(Ctrl-C, SIGTERM; outputs so far written).",
    )
    parser.add_argument("bag", type=Path, help="bag folder, metadata.yaml, .mcap or .db3 file")
    parser.add_argument("--out", type=Path, required=True, help="output folder (bag, predictions, metrics, plots)")
    parser.add_argument("--model", help="checkpoint directory, or 'demo' (default: model.path of --params)")
    parser.add_argument("--params", type=Path, help="the node's parameters YAML (e.g. config/wam_diff2.yaml)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a parameter (repeatable)"
    )
    topics = parser.add_argument_group("topics (default: chosen by message type when unambiguous)")
    for spec in INPUTS:  # one flag per input of the node's input table
        topics.add_argument(
            spec.flag, action="append" if spec.per_camera else "store", metavar="TOPIC", help=_topic_help(spec)
        )
    run = parser.add_argument_group("run")
    run.add_argument("--rate-hz", type=float, help="planning rate on the bag clock; 0 = each new front image")
    run.add_argument("--device", help="auto, cpu, cuda, cuda:N, npu, npu:N (default: model.device)")
    run.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        help="weight dtype (default: float32 on CPU, else model.dtype)",
    )
    run.add_argument(
        "--deadline-ms",
        type=float,
        metavar="MS",
        help="decoding.deadline_ms for every plan (0 = none; default: from --params)",
    )
    run.add_argument(
        "--deadline-sweep",
        action="store_true",
        help="replay unbounded, then with deadlines of 75/50/25/10 %% of the unbounded median plan time; "
        "writes deadline_curve.md / .json / .png into --out",
    )
    run.add_argument("--start", type=float, default=0.0, metavar="S", help="skip the first S seconds")
    run.add_argument("--duration", type=float, metavar="D", help="replay only D seconds")
    run.add_argument("--max-plans", type=int, metavar="N", help="stop after N planning instants")
    run.add_argument("--detect", action="store_true", help="also run detection (detection.rate_hz, or 1 Hz)")
    run.add_argument(
        "--copy-inputs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="copy the input topics (and /tf) into the output bag (default: yes)",
    )
    run.add_argument("--no-plots", action="store_true", help="do not draw the PNG plots")
    run.add_argument("--overwrite", action="store_true", help="replace earlier replay outputs in --out")
    run.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    run.add_argument(
        "--serve",
        nargs="?",
        type=int,
        const=8765,
        metavar="PORT",
        help="serve the live Foxglove view on PORT (default 8765; viewer.host, 127.0.0.1 unless set) and wait for "
        "a client before replaying",
    )
    run.add_argument(
        "--serve-speed", type=float, default=1.0, metavar="X", help="with --serve: X times real time; 0 = unpaced"
    )
    return parser


def _topic_help(spec: InputSpec) -> str:
    types = " or ".join(name.replace("/msg/", "/") for name in spec.msg_types)
    per_camera = ", repeat per camera (front camera first)" if spec.per_camera else ""
    return f"{spec.label}: {types}{per_camera}" + (" (or none)" if spec.optional else "")


def options_from_args(args: argparse.Namespace) -> ReplayOptions:
    """:class:`ReplayOptions` from parsed arguments (raises :class:`ReplayUsageError`)."""
    if not args.bag.exists():
        raise ReplayUsageError(f"bag {args.bag}: no such file or folder")
    return ReplayOptions(
        bag=args.bag,
        out=args.out,
        model=args.model,
        params=args.params,
        overrides={
            **parse_set(args.set),
            **({} if args.deadline_ms is None else {"decoding.deadline_ms": args.deadline_ms}),
        },
        topics=TopicRequest(
            {spec.role: value for spec in INPUTS if (value := getattr(args, f"{spec.role}_topic")) is not None}
        ),
        rate_hz=args.rate_hz,
        device=args.device,
        dtype=args.dtype,
        start_s=args.start,
        duration_s=args.duration,
        max_plans=args.max_plans,
        detect=args.detect,
        copy_inputs=args.copy_inputs,
        plots=not args.no_plots,
        overwrite=args.overwrite,
        progress=False if args.no_progress else None,
        serve_port=args.serve,
        serve_speed=args.serve_speed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``wam-diff2-replay`` (see the module docstring); returns the exit code."""
    toolkit.tolerant_output()
    parser = build_parser()
    args = toolkit.parse(parser, argv)
    if isinstance(args, int):
        return args
    prog = parser.prog
    previous = INTERRUPTS.install()
    try:
        options = options_from_args(args)
        if args.deadline_sweep:
            from wam_diff2_ros.replay.sweep import deadline_sweep

            sweep = deadline_sweep(options)
            print(sweep.summary, end="")
            return sweep.exit_code
        result = replay(options)
    except ReplayUsageError as exc:
        toolkit.error(prog, exc)
        return EXIT_USAGE
    except ReplayModelError as exc:
        toolkit.error(prog, exc)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        INTERRUPTS.restore(previous)
    print(result.summary, end="")
    if result.error:
        toolkit.error(prog, result.error)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
