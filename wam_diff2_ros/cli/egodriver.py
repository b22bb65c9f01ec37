"""``wam-diff2-egodriver --model M [--params FILE] (--port P [--host 127.0.0.1] | --socket PATH)``: serve the
planner as an egodriver policy (:class:`wam_diff2_ros.egodriver.policy.WamDiff2Driver`) over gRPC until
interrupted (Ctrl-C or SIGTERM). ``--fake-loop STEPS`` instead serves it on a private unix socket, drives it
through ``carla-driver-interface``'s fake loop and prints the figures (:mod:`wam_diff2_ros.egodriver.fake_loop`)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from wam_diff2_ros.cli import toolkit

PROG = "wam-diff2-egodriver"
EXIT_MODEL = 3


def build_parser() -> toolkit.Parser:
    from carla_driver_interface.service import SERVICE_MODES

    from wam_diff2_ros.egodriver.config import CADENCES, DEFAULT_MODEL, MODEL_ENV, PARAMS_ENV

    parser = toolkit.Parser(
        prog=PROG,
        description="Serve WAM-Diff2 as an egodriver policy (AlpaSim's egodriver.EgodriverService, "
        "carla-driver-interface's contract) on a TCP port or a unix socket.",
        epilog="Exit codes: 0 stopped; 2 usage error; 3 the model, the parameter file or a policy option cannot be "
        "used (nothing served).",
    )
    parser.add_argument(
        "--model",
        default=None,
        help=f"checkpoint directory, 'demo' or 'tiny' (default: ${MODEL_ENV}, else {DEFAULT_MODEL})",
    )
    parser.add_argument("--params", default=None, help=f"node parameter YAML (default: ${PARAMS_ENV}, if set)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="TCP port (0: any free port, printed)")
    where.add_argument("--socket", help="unix socket path")
    where.add_argument(
        "--fake-loop", type=int, metavar="STEPS", help="drive the policy STEPS steps through the fake loop and exit"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind with --port (default 127.0.0.1)")
    parser.add_argument("--camera", default="", help="planning camera's logical id (default: the first declared)")
    parser.add_argument("--cadence", choices=CADENCES, default="free", help="when to plan (docs/egodriver.md)")
    parser.add_argument(
        "--plan-interval", type=float, default=0.0, help="plan on a frame this long after the last planned one (s)"
    )
    parser.add_argument("--route-lookahead", type=float, help="route rule: the target point's distance (m)")
    parser.add_argument("--route-lateral-threshold", type=float, help="route rule: left/right beyond this (m)")
    parser.add_argument("--device", help="model.device: auto, cpu, cuda, ...")
    parser.add_argument("--size", default="320x180", help="--fake-loop: camera image WIDTHxHEIGHT (default 320x180)")
    parser.add_argument(
        "--mode",
        choices=SERVICE_MODES,
        default="carla",
        help="the runtime on the other end: carla (autoware_carla_scenario, the fake loop) or alpasim",
    )
    parser.add_argument("--max-workers", type=int, default=8, help="gRPC handler threads")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    try:
        parser = build_parser()
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "carla_driver_interface":
            raise
        print(f"{PROG}: error: needs carla-driver-interface: pip install 'wam_diff2_ros[egodriver]'", file=sys.stderr)
        return toolkit.EXIT_USAGE
    args = toolkit.parse(parser, argv)
    if isinstance(args, int):
        return args
    refused = toolkit.refuse(PROG, toolkit.below_minimum(args, port=0, max_workers=1, fake_loop=1, plan_interval=0))
    if refused is not None:
        return refused
    width, _, height = args.size.partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) >= 32 and int(height) >= 32):
        return toolkit.refuse(PROG, [f"--size {args.size}: expected WIDTHxHEIGHT, at least 32x32"]) or 2
    if args.port is not None and args.port > 65535:
        return toolkit.refuse(PROG, [f"--port must be <= 65535, got {args.port}"]) or 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from carla_driver_interface.server import build_server

    from wam_diff2_ros.egodriver.config import PolicyConfigError
    from wam_diff2_ros.egodriver.policy import WamDiff2Driver

    try:
        policy = WamDiff2Driver(
            model=args.model,
            params=args.params,
            camera=args.camera,
            cadence=args.cadence,
            plan_interval_s=args.plan_interval,
            route_lookahead_m=args.route_lookahead,
            route_lateral_threshold_m=args.route_lateral_threshold,
            device=args.device,
        )
    except PolicyConfigError as exc:
        toolkit.error(PROG, exc)
        return EXIT_MODEL
    if args.fake_loop is not None:
        return _fake_loop(policy, args.fake_loop, int(width), int(height))
    host = f"unix:{os.path.abspath(args.socket)}" if args.socket else args.host
    try:
        server, port = build_server(
            policy, port=args.port or 0, host=host, max_workers=args.max_workers, mode=args.mode
        )
    except RuntimeError as exc:
        toolkit.error(PROG, exc)
        return toolkit.EXIT_USAGE
    server.start()
    where = host if args.socket else f"{args.host}:{port}"
    print(f"{PROG}: serving {policy.config.model_path} on {where} ({args.mode} mode)", flush=True)
    return _serve_until_stopped(server)


def _fake_loop(policy: object, steps: int, width: int, height: int) -> int:
    from wam_diff2_ros.egodriver.fake_loop import fake_loop_figures

    figures = fake_loop_figures(policy, steps, width, height)
    print(figures.text(), end="", flush=True)
    return toolkit.EXIT_OK


def _serve_until_stopped(server: object) -> int:
    import signal
    import threading

    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop(grace=1.0).wait()  # type: ignore[attr-defined]
    return toolkit.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
