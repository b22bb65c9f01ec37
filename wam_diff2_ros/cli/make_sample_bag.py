"""``wam-diff2-make-sample-bag``: write the deterministic synthetic drive (:mod:`wam_diff2_ros.sim`) as a bag."""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path

from wam_diff2_ros.cli import toolkit
from wam_diff2_ros.sim.sample_bag import make_sample_bag

#: The flags' defaults are the library's (one source).
DEFAULTS = {name: p.default for name, p in inspect.signature(make_sample_bag).parameters.items()}

PROG = "wam-diff2-make-sample-bag"


def main(argv: Sequence[str] | None = None) -> int:
    """``wam-diff2-make-sample-bag OUT_DIR [--seconds 25] [--seed 0] [--width 960 --height 540] [--raw]``.

    Exit codes: 0 written, 2 bad arguments or the bag could not be written.
    """
    parser = toolkit.Parser(
        prog=PROG,
        description="Write a deterministic synthetic drive (front camera, odometry, acceleration, "
        "navigation command) as a rosbag2 MCAP folder.",
    )
    parser.add_argument("out_dir", type=Path, help="bag folder to create (must not exist unless --overwrite)")
    parser.add_argument(
        "--seconds", type=float, default=DEFAULTS["seconds"], help="drive length in seconds (default %(default)g)"
    )
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="scenario seed (default %(default)s)")
    parser.add_argument("--width", type=int, default=DEFAULTS["width"], help="image width (default %(default)s)")
    parser.add_argument("--height", type=int, default=DEFAULTS["height"], help="image height (default %(default)s)")
    parser.add_argument("--raw", action="store_true", help="write sensor_msgs/Image rgb8 instead of JPEG")
    parser.add_argument(
        "--camera-rate-hz",
        type=float,
        default=DEFAULTS["camera_rate_hz"],
        help="camera rate in Hz (default %(default)g)",
    )
    parser.add_argument("--camera-rate", dest="camera_rate_hz", type=float, help=argparse.SUPPRESS)  # old spelling
    parser.add_argument(
        "--quality", type=int, default=DEFAULTS["jpeg_quality"], help="JPEG quality 1-100 (default %(default)s)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing bag folder")
    args = parser.parse_args(argv)
    from wam_diff2_ros.bag import BagError

    def progress(done: int, total: int) -> None:
        if done % 25 == 0 or done == total:
            print(f"\r  rendered {done}/{total} frames", end="", file=sys.stderr, flush=True)

    try:
        result = make_sample_bag(
            args.out_dir,
            seconds=args.seconds,
            seed=args.seed,
            width=args.width,
            height=args.height,
            raw=args.raw,
            camera_rate_hz=args.camera_rate_hz,
            jpeg_quality=args.quality,
            overwrite=args.overwrite,
            progress=progress,
        )
    except (ValueError, BagError) as exc:
        toolkit.error(PROG, exc)
        return toolkit.EXIT_USAGE
    print(file=sys.stderr)
    track = result.track
    size_mb = result.size_bytes / 1e6
    print(f"wrote {result.path} ({size_mb:.2f} MB, {result.seconds:g} s) in {result.elapsed_s:.1f} s")
    for topic, count in sorted(result.counts.items()):
        print(f"  {topic}: {count} messages")
    entry = (track.turn_entry_ns - track.start_ns) / 1e9
    exit_ = (track.turn_exit_ns - track.start_ns) / 1e9
    print(f"  left turn (radius {track.turn_radius_m:.1f} m) from t={entry:.1f} s to t={exit_:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
