"""Time ``image_msg_to_rgb`` per encoding at 1080p (and JPEG/PNG decode), median of N runs, in ms.

    wam-diff2-bench conversions [--repeat 30] [--width 1920 --height 1080] [--threads N]

Each message is built once (as a subscriber receives it: serialised and deserialised by rclpy), then
converted ``--repeat`` times. ``--threads`` sets ``cv2.setNumThreads`` (default: OpenCV's own choice).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import numpy as np


def main(argv: Sequence[str] | None = None) -> int:
    """Print one line per encoding: median and best time of the conversion to RGB."""
    parser = argparse.ArgumentParser(prog="wam-diff2-bench conversions", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)

    import cv2
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import CompressedImage, Image

    from wam_diff2_ros.ros import conversions

    if args.threads is not None:
        cv2.setNumThreads(args.threads)
    width, height = args.width, args.height
    rng = np.random.default_rng(0)
    rgb = cv2.GaussianBlur(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8), (9, 9), 3)

    def timed(convert, msg) -> tuple[float, float]:
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            convert(msg)
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times), min(times)

    print(f"OpenCV {cv2.__version__}, {cv2.getNumThreads()} thread(s), {width}x{height}, {args.repeat} runs")
    print(f"{'encoding':<14} {'median ms':>10} {'best ms':>9}")
    for encoding in conversions.SUPPORTED_ENCODINGS:
        fmt = conversions._FORMATS[encoding]
        rows = conversions._plane_rows(fmt, height)
        step = width * fmt.channels * fmt.depth
        msg = Image()
        msg.header.stamp.sec = 1
        msg.height, msg.width, msg.encoding, msg.step = height, width, encoding, step
        msg.data = rng.integers(0, 256, size=rows * step, dtype=np.uint8).tobytes()
        msg = deserialize_message(serialize_message(msg), Image)
        median, best = timed(conversions.image_msg_to_rgb, msg)
        print(f"{encoding:<14} {median:>10.2f} {best:>9.2f}")
    for kind, ext in (("jpeg", ".jpg"), ("png", ".png")):
        ok, payload = cv2.imencode(ext, rgb)
        assert ok
        msg = CompressedImage(format=kind, data=payload.tobytes())
        msg.header.stamp.sec = 1
        msg = deserialize_message(serialize_message(msg), CompressedImage)
        median, best = timed(conversions.compressed_msg_to_rgb, msg)
        print(f"{kind:<14} {median:>10.2f} {best:>9.2f}")
    return 0
