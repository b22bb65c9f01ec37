"""``wam-diff2-play``: publish a rosbag2 bag over DDS on its own timeline (:mod:`wam_diff2_ros.bag.play`).

Exit codes: 0 done, 2 bad command line or the bag cannot be opened, 3 the bag is damaged (everything readable
before the damage was published), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from wam_diff2_ros.bag import BagError, BagReader, message_class
from wam_diff2_ros.bag.play import parse_remaps, play
from wam_diff2_ros.cli import toolkit

PROG = "wam-diff2-play"


def _parser() -> argparse.ArgumentParser:
    parser = toolkit.Parser(
        prog=PROG,
        description="Publish a rosbag2 bag (MCAP or sqlite3) over DDS on its timeline, like `ros2 bag play`.",
    )
    parser.add_argument("bag", help="bag folder, its metadata.yaml, or a .mcap / .db3 file")
    parser.add_argument("--rate", type=float, default=1.0, help="playback speed factor (default 1.0)")
    parser.add_argument("--clock", action="store_true", help="publish /clock with the bag's time (use_sim_time)")
    parser.add_argument("--clock-hz", type=float, default=100.0, help="/clock rate between messages (default 100)")
    parser.add_argument("--topics", nargs="+", default=None, help="play only these topics")
    parser.add_argument("--remap", action="append", default=[], metavar="/FROM:=/TO", help="publish FROM as TO")
    parser.add_argument("--start", type=float, default=0.0, help="skip the first S seconds of the bag")
    parser.add_argument("--duration", type=float, default=None, help="play D seconds from --start")
    parser.add_argument("--loop", action="store_true", help="play again from the start until interrupted")
    parser.add_argument(
        "--wait-for-subscribers",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for at least one subscriber on every played topic before starting",
    )
    parser.add_argument("--delay", type=float, default=0.5, help="seconds between creating publishers and playing")
    parser.add_argument("--qos-depth", type=int, default=100, help="keep-last history of each publisher (default 100)")
    parser.add_argument(
        "--wait-for-all-acked",
        type=float,
        default=3500.0,
        metavar="MS",
        help="at the end, wait up to MS ms for reliable subscribers to acknowledge everything (default 3500; 0: off)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``wam-diff2-play``."""
    args = _parser().parse_args(argv)
    try:
        remaps = parse_remaps(args.remap)
        if not args.rate > 0:
            raise ValueError(f"--rate must be > 0, got {args.rate}")
        if not args.clock_hz > 0:
            raise ValueError(f"--clock-hz must be > 0, got {args.clock_hz}")
        if not args.wait_for_all_acked >= 0:
            raise ValueError(f"--wait-for-all-acked must be >= 0, got {args.wait_for_all_acked}")
        if args.qos_depth < 1:
            raise ValueError(f"--qos-depth must be >= 1, got {args.qos_depth}")
        if args.start < 0 or (args.duration is not None and args.duration <= 0):
            raise ValueError("--start must be >= 0 and --duration > 0")
        reader = BagReader(Path(args.bag))
    except (ValueError, BagError, OSError) as exc:
        toolkit.error(PROG, exc)
        return toolkit.EXIT_USAGE

    with reader:
        topics = dict(reader.topics)
        if not topics and reader.damaged:
            toolkit.error(PROG, f"bag {reader.path} is damaged: {reader.damaged}; no topic is readable")
            return 3
        if args.topics is not None:
            unknown = sorted(set(args.topics) - set(topics))
            if unknown:
                toolkit.error(PROG, f"not in the bag: {', '.join(unknown)} (it has {', '.join(sorted(topics))})")
                return toolkit.EXIT_USAGE
            topics = {name: topics[name] for name in args.topics}
        playable = {name: info for name, info in topics.items() if message_class(info.msgtype) is not None}
        for name in sorted(set(topics) - set(playable)):
            toolkit.warning(PROG, f"skipping {name}: type {topics[name].msgtype} is not importable")
        if not playable:
            toolkit.error(PROG, "nothing to play (no topic with an importable message type)")
            return toolkit.EXIT_USAGE
        return play(reader, playable, remaps, args)


if __name__ == "__main__":
    sys.exit(main())
