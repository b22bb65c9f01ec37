"""The closed loop's figures (``wam-diff2-drive SCENARIO --bench``): the renderer's time per frame at the episode's
image size, rendered from poses off the lane centre and heading, and the in-process episode's wall time per
simulated second. A benchmark that prints figures, not a test."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from wam_diff2_ros.drive.world import ScenarioSpec, build_world
from wam_diff2_ros.sim.render import Renderer


def bench_renderer(spec: ScenarioSpec, width: int, height: int, frames: int = 30) -> dict[str, float]:
    """Milliseconds per frame (median, mean, min) of ``frames`` renders along the route, each 0.5 m and 2° off."""
    world = build_world(spec)
    renderer = Renderer(world, width, height)
    renderer.render_from(0.0, 0.0, 0.0, 0.0, 0.0)  # warm
    times = []
    for k in range(frames):
        s = 2.0 * k
        x, y, yaw = (float(v[0]) for v in world.road.frenet_to_world(s, 0.5 * (-1) ** k))
        started = time.perf_counter()
        renderer.render_from(0.1 * k, x, y, yaw + math.radians(2.0) * (-1) ** k, s)
        times.append((time.perf_counter() - started) * 1000.0)
    return {
        "median_ms": float(np.median(times)),
        "mean_ms": float(np.mean(times)),
        "min_ms": float(np.min(times)),
        "frames": frames,
    }


def bench_text(render: dict[str, float], episode: dict[str, Any] | None, width: int, height: int) -> str:
    lines = [
        f"renderer {width}x{height}: median {render['median_ms']:.1f} ms, mean {render['mean_ms']:.1f} ms, "
        f"min {render['min_ms']:.1f} ms per frame ({render['frames']} frames)"
    ]
    if episode is not None:
        lines.append(
            f"episode: {episode['simulated_s']:.1f} s simulated in {episode['wall_s']:.1f} s wall = "
            f"{episode['wall_per_sim_s']:.2f} s wall per simulated second ({episode['plans']['made']} plans, "
            f"rendering {episode['render_ms_per_frame']:.1f} ms per frame)"
        )
    return "\n".join(lines) + "\n"
