"""``wam-diff2-fleet``: argparse → :func:`wam_diff2_ros.fleet.run_fleet` → exit code.

Usage, outputs and exit codes: :mod:`wam_diff2_ros.fleet`. The replay settings are ``wam-diff2-replay``'s own
arguments (taken from its parser, one definition for both commands).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from wam_diff2_ros.cli import replay as replay_cli
from wam_diff2_ros.cli import toolkit
from wam_diff2_ros.fleet import (
    EXIT_INTERRUPTED,
    EXIT_SETUP,
    EXIT_USAGE,
    FleetOptions,
    FleetSetupError,
    FleetUsageError,
    RayConfig,
    run_fleet,
)
from wam_diff2_ros.replay import ReplayModelError, ReplayUsageError
from wam_diff2_ros.replay.interrupts import INTERRUPTS

#: ``wam-diff2-replay`` arguments that the fleet sets per bag (or has no use for).
PER_BAG = {"help", "bag", "out", "overwrite"}
_DEFAULT_GROUPS = {"options", "optional arguments", "positional arguments"}


def _copy_replay_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``wam-diff2-replay``'s arguments, group by group, except :data:`PER_BAG`."""
    source = replay_cli.build_parser()
    for group in source._action_groups:
        actions = [action for action in group._group_actions if action.dest not in PER_BAG]
        if not actions:
            continue
        title = "replay settings (as wam-diff2-replay)" if group.title in _DEFAULT_GROUPS else f"replay {group.title}"
        target = parser.add_argument_group(title, group.description)
        for action in actions:
            target._add_action(action)


def build_parser() -> argparse.ArgumentParser:
    """The ``wam-diff2-fleet`` argument parser."""
    parser = toolkit.Parser(
        prog="wam-diff2-fleet",
        description="Replay many bags through the WAM-Diff2 node's planning path (as wam-diff2-replay does one) on "
        "Ray workers that load the model once each, and report per bag and pooled. Ray starts inside the command, "
        "reachable from this machine only, unless --ray-address names a cluster. A rerun with the same --out skips "
        "bags already complete.",
        epilog="Exit codes: 0 every bag replayed; 1 Ray or the model could not start; 2 bad command line or inputs; "
        "3 some bags failed (recorded with their reasons, the others complete); 130 interrupted. "
        "`wam-diff2-fleet scale WORK_DIR` measures the fleet against one replay after another on synthetic bags.",
    )
    parser.add_argument(
        "inputs", nargs="+", type=Path, metavar="BAG|DIR|MANIFEST", help="bags, folders of bags, text files of paths"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder (bags/<name>/, fleet_report.*)")
    ray = parser.add_argument_group("Ray")
    defaults = RayConfig()
    ray.add_argument(
        "--ray-address", metavar="auto|ray://HOST:PORT", help="use this Ray cluster (default: start Ray here)"
    )
    ray.add_argument("--workers", type=int, metavar="N", help="workers (default: what the resources hold)")
    ray.add_argument(
        "--cpus-per-worker", type=float, default=defaults.cpus_per_worker, help="CPUs per worker (default %(default)g)"
    )
    ray.add_argument(
        "--gpus-per-worker", type=float, default=defaults.gpus_per_worker, help="GPUs per worker (default %(default)g)"
    )
    ray.add_argument("--num-cpus", type=int, metavar="N", help="embedded Ray: cores to use (default: all)")
    ray.add_argument("--ray-log", action="store_true", help="show the workers' own output on this terminal")
    _copy_replay_arguments(parser)
    return parser


def options_from_args(args: argparse.Namespace) -> FleetOptions:
    """:class:`FleetOptions` from parsed arguments (raises :class:`FleetUsageError` / :class:`ReplayUsageError`)."""
    for name in ("workers", "num_cpus"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise FleetUsageError(f"--{name.replace('_', '-')} must be >= 1")
    if args.cpus_per_worker <= 0 or args.gpus_per_worker < 0:
        raise FleetUsageError("--cpus-per-worker must be > 0 and --gpus-per-worker >= 0")
    args.bag, args.overwrite = args.inputs[0], False  # set per bag by the fleet
    if not args.bag.exists():
        raise FleetUsageError(f"{args.bag}: no such file or folder")
    replay_options = replay_cli.options_from_args(args)
    return FleetOptions(
        inputs=list(args.inputs),
        out=args.out,
        replay=replay_options,
        ray=RayConfig(
            address=args.ray_address,
            workers=args.workers,
            cpus_per_worker=args.cpus_per_worker,
            gpus_per_worker=args.gpus_per_worker,
            num_cpus=args.num_cpus,
            log_to_driver=args.ray_log,
        ),
        progress=not args.no_progress,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``wam-diff2-fleet`` (see :mod:`wam_diff2_ros.fleet`); returns the exit code.
    ``wam-diff2-fleet scale WORK_DIR ...`` measures the fleet against one replay after another
    (:mod:`wam_diff2_ros.fleet.scale`)."""
    toolkit.tolerant_output()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["scale"]:
        from wam_diff2_ros.fleet.scale import main as scale

        return scale(argv[1:])
    parser = build_parser()
    args = toolkit.parse(parser, argv)
    if isinstance(args, int):
        return args
    prog = parser.prog
    previous = INTERRUPTS.install()
    try:
        result = run_fleet(options_from_args(args))
    except (FleetUsageError, ReplayUsageError) as exc:
        toolkit.error(prog, exc)
        return EXIT_USAGE
    except (FleetSetupError, ReplayModelError) as exc:
        toolkit.error(prog, exc)
        return EXIT_SETUP
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        INTERRUPTS.restore(previous)
    print(json.dumps(result.summary, indent=1))
    for name, reason in result.summary["failures"].items():
        toolkit.error(prog, f"{name} failed: {reason}")
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
