"""The renderer's output is pinned bit for bit: the demo model was trained on these frames, so a faster renderer
must produce the same uint8 pixels. ``test/data/render_digests.json`` holds the sha256 of each case's frame as the
renderer produced it before any speed work (``python test/test_render_digests.py --record`` rewrites it; only do
that for a deliberate change of the images)."""

from __future__ import annotations

import hashlib
import json
import math
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


@pytest.mark.parametrize("name", case_names())
def test_frame_matches_the_pinned_digest(name):
    expected = json.loads(DIGESTS.read_text())
    frame = render_case(name)
    assert frame.dtype == np.uint8 and frame.shape[2] == 3
    assert digest(frame) == expected[name], f"{name}: the renderer's pixels changed"


def test_every_case_is_pinned():
    assert sorted(json.loads(DIGESTS.read_text())) == sorted(case_names())


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    DIGESTS.parent.mkdir(exist_ok=True)
    DIGESTS.write_text(json.dumps({name: digest(render_case(name)) for name in case_names()}, indent=1) + "\n")
    print(f"wrote {len(case_names())} digests to {DIGESTS}")
