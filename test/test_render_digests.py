"""The renderer's output is pinned: the demo model was trained on these frames, so a faster renderer must produce
the same uint8 pixels. ``test/data/render_digests.json`` holds the sha256 of each case's frame as the renderer
produced it before any speed work, and the platform it was recorded on (numpy's transcendental functions may differ
in their last bit between CPUs with and without AVX-512, and between numpy builds, which can move a pixel by one
level). On that platform every frame must match bit for bit; on any platform the means of every frame's 32×18 grid
of blocks must match ``test/data/render_blocks.npz`` within 0.5 of a level (a line moved by one pixel moves its
block's mean by several levels).
``python test/test_render_digests.py --record`` rewrites both; only do that for a deliberate change of the images."""

from __future__ import annotations

import hashlib
import json
import math
import platform
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from wam_diff2_ros.drive.vehicle import VehicleLimits
from wam_diff2_ros.drive.world import build_world, load_scenarios
from wam_diff2_ros.sim.render import Renderer
from wam_diff2_ros.sim.scenario import Scenario

DIGESTS = Path(__file__).parent / "data" / "render_digests.json"
BLOCKS = Path(__file__).parent / "data" / "render_blocks.npz"
GRID = (18, 32)  # blocks per column and per row (every size divides by it)
BLOCK_TOLERANCE = 0.5  # levels of 255
SIZES = ((960, 540), (320, 180), (640, 360))  # 640x360: a row both sky and ground

# (scenario, t s, arc length s m, lateral offset d m, heading offset deg): poses on and off the lane centre and
# heading, on straights and turns, actors far, near, crossing the image edge and the camera's near plane.
DRIVE_CASES = (
    ("straight_10", 0.0, 0.0, 0.0, 0.0),
    ("straight_10", 3.1, 37.0, 0.5, 2.0),
    ("straight_10", 7.0, 150.0, -1.3, -9.0),
    ("left_r20", 2.0, 40.0, 0.0, 0.0),
    ("left_r20", 4.5, 65.0, 0.6, -4.0),
    ("left_r20", 6.0, 80.0, -0.4, 25.0),
    ("right_r25", 5.0, 70.0, 0.2, 3.0),
    ("lead_slower", 0.0, 0.0, 0.0, 0.0),
    ("lead_slower", 4.0, 38.0, -0.3, 1.5),
    ("lead_slower", 6.0, 50.0, 0.0, 0.0),
    ("stopped_in_lane", 1.0, 10.0, 0.0, 0.0),
    ("stopped_in_lane", 5.0, 60.0, 0.0, 0.0),
    ("stopped_in_lane", 6.0, 64.5, 0.3, -3.0),
    ("stopped_in_lane", 6.5, 68.0, 2.2, 0.0),
    ("stopped_in_lane", 6.6, 70.0, 2.4, 12.0),
    ("stopped_in_lane", 7.0, 68.5, -2.6, -30.0),
    ("stopped_in_lane", 6.7, 66.5, 1.4, 40.0),
    ("stopped_in_lane", 6.8, 67.5, 1.9, 70.0),
    ("offset_left", 2.0, 20.0, 1.0, 3.0),
)
# The sample drive (seed, t s), rendered by Renderer.render along its own path.
SAMPLE_CASES = ((0, 0.0), (0, 6.0), (0, 9.5), (0, 13.0), (3, 4.0), (3, 11.0), (3, 19.0))


def case_names() -> list[str]:
    names = []
    for width, height in SIZES:
        names += [f"drive:{c[0]}:t{c[1]}:s{c[2]}:d{c[3]}:h{c[4]}:{width}x{height}" for c in DRIVE_CASES]
        names += [f"sample:seed{seed}:t{t}:{width}x{height}" for seed, t in SAMPLE_CASES]
    return names


@cache
def _drive_renderer(scenario: str, width: int, height: int) -> Renderer:
    return Renderer(build_world(load_scenarios(scenario)[0], VehicleLimits()), width, height)


@cache
def _sample_renderer(seed: int, width: int, height: int) -> Renderer:
    return Renderer(Scenario(25.0, seed), width, height)


def render_case(name: str) -> np.ndarray:
    kind, *fields, size = name.split(":")
    width, height = (int(v) for v in size.split("x"))
    if kind == "sample":
        return _sample_renderer(int(fields[0][4:]), width, height).render(float(fields[1][1:]))
    scenario, t, s, d, heading = fields[0], *(float(f[1:]) for f in fields[1:])
    renderer = _drive_renderer(scenario, width, height)
    x, y, yaw = (float(v[0]) for v in renderer.sc.road.frenet_to_world(s, d))
    return renderer.render_from(t, x, y, yaw + math.radians(heading), s)


def digest(frame: np.ndarray) -> str:
    return hashlib.sha256(f"{frame.shape}{frame.dtype}".encode() + np.ascontiguousarray(frame).tobytes()).hexdigest()


def block_means(frame: np.ndarray) -> np.ndarray:
    """The mean of each block of the GRID per channel, (18, 32, 3) float32."""
    height, width, _ = frame.shape
    rows, cols = GRID
    blocks = frame.reshape(rows, height // rows, cols, width // cols, 3).astype(np.float32)
    return blocks.mean(axis=(1, 3))


def platform_signature() -> dict[str, str]:
    """What the frames' last bits may depend on: the CPU's vector extensions and the numerical libraries."""
    import cv2
    import PIL

    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = ""
    return {
        "machine": platform.machine(),
        "avx512f": str(" avx512f" in flags),
        "avx2": str(" avx2" in flags),
        "numpy": np.__version__,
        "pillow": PIL.__version__,
        "opencv": cv2.__version__,
    }


@cache
def _pinned() -> dict:
    return json.loads(DIGESTS.read_text())


@pytest.mark.parametrize("name", case_names())
def test_frame_matches_the_pinned_frame(name: str) -> None:
    frame = render_case(name)
    assert frame.dtype == np.uint8 and frame.shape[2] == 3
    with np.load(BLOCKS) as blocks:
        expected = blocks[name].astype(np.float32)
    gap = float(np.abs(block_means(frame) - expected).max())
    assert gap <= BLOCK_TOLERANCE, f"{name}: the renderer's look changed (a block mean moved {gap:.2f} levels)"
    if _pinned()["platform"] == platform_signature():
        assert digest(frame) == _pinned()["digests"][name], f"{name}: the renderer's pixels changed"


def test_every_case_is_pinned() -> None:
    assert sorted(_pinned()["digests"]) == sorted(case_names())
    with np.load(BLOCKS) as blocks:
        assert sorted(blocks.files) == sorted(case_names())


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    DIGESTS.parent.mkdir(exist_ok=True)
    frames = {name: render_case(name) for name in case_names()}
    pinned = {"platform": platform_signature(), "digests": {name: digest(f) for name, f in frames.items()}}
    DIGESTS.write_text(json.dumps(pinned, indent=1) + "\n")
    np.savez_compressed(BLOCKS, **{name: block_means(f).astype(np.float16) for name, f in frames.items()})
    print(f"wrote {len(frames)} digests to {DIGESTS} and their block means to {BLOCKS}")
