"""``wam-diff2-drive``: argparse → closed-loop episodes (:mod:`wam_diff2_ros.drive`) → exit code.

``wam-diff2-drive SCENARIO --model M --out DIR``: SCENARIO is a built-in scenario's name (``all`` for every one),
a scenario file (YAML/JSON; one scenario or ``scenarios: [...]``) or ``FILE:NAME``. One scenario writes into DIR;
several (or one with ``--references``) write DIR/<name>/ each (resumable) and the pooled DIR/scores.json and
DIR/scores.md; ``--references`` also drives the reference planners into DIR/references/<planner>/<name>/.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from wam_diff2_ros.drive.episode import EpisodeOptions
from wam_diff2_ros.drive.planners import planner_config, planner_identity
from wam_diff2_ros.drive.reference import is_reference
from wam_diff2_ros.drive.run import EXIT_MODEL, EXIT_USAGE, DriveUsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="wam-diff2-drive",
        description="Drive the simulated car closed loop with the node's plans and score it (NAVSIM PDMS terms).",
        epilog="Exit codes: 0 done; 2 usage or scenario error (nothing ran); 3 the model cannot be loaded; "
        "130 interrupted (outputs so far written).",
    )
    parser.add_argument("scenario", help="built-in scenario name, 'all', a scenario file, or FILE:NAME")
    parser.add_argument(
        "--model",
        help="checkpoint directory, 'demo' or 'tiny', or a reference planner: 'expert' (privileged lane centre + "
        "IDM) or 'constant-velocity' (required unless --list)",
    )
    parser.add_argument(
        "--references",
        action="store_true",
        help="also drive both reference planners (expert, constant-velocity) with the same settings into "
        "OUT/references/ and put their PDMS beside the model's in scores.md / scores.json",
    )
    parser.add_argument(
        "--reference-driver",
        action="append",
        default=[],
        metavar="NAME=ADDRESS",
        help="with --references: also drive the egodriver policy served at ADDRESS (HOST:PORT or unix:PATH, e.g. "
        "carla-driver-interface's route_follower) into OUT/references/NAME/ and put it beside the model (repeat)",
    )
    parser.add_argument("--out", type=Path, help="output folder (required unless --list)")
    parser.add_argument("--seed", type=int, help="override the scenarios' seeds")
    parser.add_argument(
        "--latency-ms",
        type=float,
        help="each plan takes effect this long after its instant "
        "(default: its measured wall time); set it for a deterministic episode",
    )
    parser.add_argument("--duration", type=float, help="override the scenarios' duration_s")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a node parameter")
    parser.add_argument("--device", help="auto, cpu, cuda, ... (default: model.device)")
    parser.add_argument("--size", default="960x540", help="camera image size WIDTHxHEIGHT (default 960x540)")
    parser.add_argument("--no-bag", action="store_true", help="do not write the MCAP")
    parser.add_argument("--no-video", action="store_true", help="do not write bev.mp4")
    parser.add_argument("--overwrite", action="store_true", help="replace outputs (and rerun finished episodes)")
    parser.add_argument("--workers", type=int, help="run the episodes on this many Ray workers (the fleet's Ray)")
    parser.add_argument(
        "--ray-address", help="join this Ray cluster ('auto', ray://host:port) instead of an embedded one"
    )
    parser.add_argument(
        "--dds",
        action="store_true",
        help="be the simulator node: plan with the planner node "
        "over DDS (/clock, sensor topics; the node needs use_sim_time and planning.rate_hz 0)",
    )
    parser.add_argument(
        "--driver",
        metavar="ADDRESS",
        help="plan with the egodriver policy (AlpaSim's gRPC contract) served at HOST:PORT or unix:PATH instead of "
        "the model in this process (--model is then not needed)",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--bench", action="store_true", help="print the renderer's and the episode's timing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``wam-diff2-drive``; returns the exit code."""
    from wam_diff2_ros.cli.toolkit import tolerant_output

    tolerant_output()
    from wam_diff2_ros.drive.world import ScenarioError, build_world, load_scenarios
    from wam_diff2_ros.replay.errors import ReplayUsageError
    from wam_diff2_ros.replay.settings import parse_set

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--ros-args" in argv:  # started as a ROS node (closed_loop.launch.py): its name and remaps are fixed
        argv = argv[: argv.index("--ros-args")]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    prog = parser.prog
    try:
        specs = [spec.with_seed(args.seed) for spec in load_scenarios(args.scenario)]
        if args.duration is not None:
            specs = [dataclasses.replace(spec, duration_s=float(args.duration)) for spec in specs]
        for spec in specs:
            build_world(spec)  # every scenario checked before anything runs
        if args.list:
            for spec in specs:
                speed = "its own speed profile" if spec.road == "sample" else f"{spec.speed_mps:g} m/s"
                print(f"{spec.name}: seed {spec.seed}, {spec.duration_s:g} s, {speed}. {spec.description}")
            return 0
        if args.driver and (args.dds or args.workers is not None):
            raise DriveUsageError("--driver runs in this process: not with --dds or --workers")
        if (not args.model and not args.driver) or args.out is None:
            raise DriveUsageError("--model (or --driver) and --out are required")
        width, _, height = args.size.partition("x")
        if not (width.isdigit() and height.isdigit()) or not (64 <= int(width) <= 4096 and 48 <= int(height) <= 4096):
            raise DriveUsageError(f"--size {args.size}: expected WIDTHxHEIGHT within 64x48 .. 4096x4096")
        if args.latency_ms is not None and not 0 <= args.latency_ms <= 10000:
            raise DriveUsageError("--latency-ms must be in [0, 10000]")
        overrides = parse_set(args.set)
        if args.dds:
            if is_reference(args.model):
                raise DriveUsageError(f"--model {args.model}: a reference planner drives in-process only (no --dds)")
            overrides["planning.rate_hz"] = 0.0  # the planner node plans on each image; the simulator picks
        config = planner_config(args.model or "tiny", args.device, overrides)  # with --driver: its defaults only
        settings = {**planner_identity(config), "overrides": overrides}
    except (ScenarioError, DriveUsageError, ReplayUsageError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # the demo model's files
        print(f"{prog}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_MODEL
    options = EpisodeOptions(
        dds=args.dds,
        driver=args.driver or "",
        out=args.out,
        latency_ms=args.latency_ms,
        width=int(width),
        height=int(height),
        overwrite=args.overwrite,
        bag=not args.no_bag,
        video=not args.no_video,
        settings=settings,
    )
    from wam_diff2_ros.replay.interrupts import INTERRUPTS

    previous = INTERRUPTS.install()
    try:
        return _run(prog, args, specs, options, config)
    except DriveUsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    finally:
        INTERRUPTS.restore(previous)


def _run(prog: str, args: argparse.Namespace, specs: list, options: EpisodeOptions, config: object) -> int:
    from wam_diff2_ros.drive.batch import run_many, run_references
    from wam_diff2_ros.drive.bench import bench_renderer, bench_text
    from wam_diff2_ros.drive.planners import load_planner
    from wam_diff2_ros.drive.run import run_episode
    from wam_diff2_ros.replay.settings import parse_set

    if args.references and (args.dds or args.workers is not None):
        raise DriveUsageError("--references runs in this process (not with --dds or --workers)")
    drivers = _reference_drivers(args.reference_driver)
    if drivers and not args.references:
        raise DriveUsageError("--reference-driver puts a policy beside the model: pass --references too")
    if args.dds:
        return _run_dds(prog, specs, options, config)
    if args.workers is not None:
        if args.workers < 1:
            raise DriveUsageError("--workers must be >= 1")
        return _run_ray(args, specs, options)
    if args.driver:
        return _run_driver(specs, options, config, args.references, parse_set(args.set), drivers)
    if len(specs) > 1:
        from wam_diff2_ros.drive.batch import scenario_folders

        scenario_folders(specs, options, str(config.model_path))  # refused before the model loads
    if args.bench:
        render = bench_renderer(specs[0], options.width, options.height)
        print(bench_text(render, None, options.width, options.height), end="", flush=True)
    try:
        engine = load_planner(config)
    except Exception as exc:
        print(f"{prog}: error: cannot load the model: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_MODEL
    if len(specs) == 1 and not args.references:
        result = run_episode(specs[0], options, config, engine)
        score = result.score
        terms = score["score"]
        print(
            f"{specs[0].name}: PDMS {_f(terms.get('pdms'))} (NC {_f(terms.get('nc'))}, DAC {_f(terms.get('dac'))}, "
            f"EP {_f(terms.get('ep'))}, TTC {_f(terms.get('ttc'))}, C {_f(terms.get('c'))}); "
            f"{score['plans']['valid']}/{score['plans']['made']} plans valid; {score['stop_reason']}"
        )
        if args.bench:
            print(
                bench_text(
                    bench_renderer(specs[0], options.width, options.height), score, options.width, options.height
                ),
                end="",
            )
        return result.exit_code
    rows, code = run_many(specs, options, config, engine)
    if args.references and code == 0:
        _refs, code = run_references(specs, options, rows, parse_set(args.set), drivers=drivers)
    print((options.out / "scores.md").read_text(encoding="utf-8"), end="")
    return code


def _reference_drivers(items: list[str]) -> dict[str, str]:
    """``--reference-driver NAME=ADDRESS`` items as name → address (a name is a plain folder name, not a
    reference planner's, and given once)."""
    from wam_diff2_ros.core.safe_names import UnsafeNameError, safe_name
    from wam_diff2_ros.drive.reference import REFERENCE_NAMES

    drivers: dict[str, str] = {}
    for item in items:
        name, sep, address = item.partition("=")
        name, address = name.strip(), address.strip()
        try:
            plain = bool(sep and address) and safe_name(name) == name
        except UnsafeNameError:
            plain = False
        if not plain or name in REFERENCE_NAMES or name in drivers:
            raise DriveUsageError(
                f"--reference-driver {item!r}: expected NAME=ADDRESS with a plain NAME (letters, digits, . _ -) "
                f"used once and not one of {', '.join(REFERENCE_NAMES)}"
            )
        drivers[name] = address
    return drivers


def _run_driver(
    specs: list,
    options: EpisodeOptions,
    config: object,
    references: bool = False,
    overrides: dict | None = None,
    drivers: dict[str, str] | None = None,
) -> int:
    """Every scenario with the egodriver policy at ``--driver`` (one session per episode), with the reference
    planners beside it on request."""
    from wam_diff2_ros.drive.batch import run_many, run_references
    from wam_diff2_ros.drive.run import run_episode

    if len(specs) == 1 and not references:
        result = run_episode(specs[0], options, config, None)
        terms, plans = result.score["score"], result.score["plans"]
        print(
            f"{specs[0].name} ({result.score['model']}): PDMS {_f(terms.get('pdms'))}; "
            f"{plans['valid']}/{plans['made']} plans valid; {result.score['stop_reason']}"
        )
        return result.exit_code
    rows, code = run_many(specs, options, config, None)
    if references and code == 0:
        _refs, code = run_references(specs, options, rows, overrides or {}, drivers=drivers)
    print((options.out / "scores.md").read_text(encoding="utf-8"), end="")
    return code


def _run_ray(args: argparse.Namespace, specs: list, options: EpisodeOptions) -> int:
    from wam_diff2_ros.drive.fleet import run_on_ray
    from wam_diff2_ros.replay.settings import parse_set

    _rows, code = run_on_ray(
        specs, options, args.model, args.device, parse_set(args.set), args.workers, args.ray_address
    )
    print((options.out / "scores.md").read_text(encoding="utf-8"), end="")
    return code


def _run_dds(prog: str, specs: list, options: EpisodeOptions, config: object) -> int:
    """The simulator as a ROS node beside the planner node (one scenario)."""
    import rclpy

    from wam_diff2_ros.drive.run import run_episode

    if len(specs) != 1:
        raise DriveUsageError("--dds runs one scenario")
    rclpy.init()
    try:
        result = run_episode(specs[0], options, config, None)
    finally:
        if rclpy.ok():
            rclpy.shutdown()
    terms = result.score["score"]
    print(f"{specs[0].name} (DDS): PDMS {_f(terms.get('pdms'))}; {result.score['stop_reason']}")
    return result.exit_code


def _f(value: object) -> str:
    return "–" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
