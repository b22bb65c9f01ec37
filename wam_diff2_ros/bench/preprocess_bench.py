"""Time the image preprocessing of one camera frame (host side), median and best of N, in one process.

    OMP_NUM_THREADS=2 wam-diff2-bench preprocess --width 1920 --height 1080 --repeats 15
    git show REV:wam_diff2_ros/core/image_preprocess.py > /tmp/old_preprocess.py
    wam-diff2-bench preprocess --previous /tmp/old_preprocess.py

Rows: `host` is what the engine does on the CPU before moving an image to a GPU (resize, cut into uint8
patches); `host + pixel values` adds building the float32 pixel values on the CPU (what a CPU engine does).
`--previous FILE` adds the same image through another version of core/image_preprocess.py (its `preprocess_image`
to float32 pixel values), loaded from FILE, for a comparison within one run; the script checks that both
give the same pixel values, bit for bit.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from wam_diff2_ros.bench.timing import host_ms
from wam_diff2_ros.core import image_preprocess


def load_module(path: Path) -> object:
    spec = importlib.util.spec_from_file_location("previous_processor", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="wam-diff2-bench preprocess", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--previous", type=Path, help="another core/image_preprocess.py to compare with")
    args = parser.parse_args(argv)
    frame = np.random.default_rng(0).integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)
    config = image_preprocess.ImageProcessorConfig()
    rows = {
        "host (uint8 patches)": lambda: image_preprocess.preprocess_image(frame, config).patches,
        "host + pixel values on the CPU": lambda: image_preprocess.preprocess_image(frame, config).pixel_values,
    }
    if args.previous is not None:
        previous = load_module(args.previous)
        old_config = previous.ImageProcessorConfig()
        same = torch.equal(
            previous.preprocess_image(frame, old_config).pixel_values,
            image_preprocess.preprocess_image(frame, config).pixel_values,
        )
        print(f"pixel values identical to {args.previous}: {same}")
        rows["previous (float32 pixel values)"] = lambda: previous.preprocess_image(frame, old_config).pixel_values
    print(f"{args.width}x{args.height} frame, torch threads {torch.get_num_threads()}, {args.repeats} repeats")
    for _ in range(2):  # two rounds, interleaved: the spread between rounds shows the machine's noise
        for name, function in rows.items():
            median, best = host_ms(function, args.repeats)
            print(f"  {name:34s} median {median:6.1f} ms   best {best:6.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
