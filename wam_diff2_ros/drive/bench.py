"""The closed loop's figures (``wam-diff2-drive SCENARIO --bench``): the renderer's time per frame at the episode's
image size, rendered from poses off the lane centre and heading, and the in-process episode's wall time per
simulated second. A benchmark that prints figures, not a test."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from wam_diff2_ros.drive.world import ScenarioSpec, build_world
from wam_diff2_ros.sim import parallel
from wam_diff2_ros.sim.render import Renderer


def bench_renderer(spec: ScenarioSpec, width: int, height: int, frames: int = 30) -> dict[str, float]:
    """Milliseconds per frame (median, mean, min) of ``frames`` renders along the route, each 0.5 m and 2° off,
    with the renderer's thread count; when that is more than one, each pose is also rendered on one thread right
    after (``one_thread_median_ms``: the same poses, alternately, so that both see the same machine)."""
    world = build_world(spec)
    renderer = Renderer(world, width, height)
    renderer.render_from(0.0, 0.0, 0.0, 0.0, 0.0)  # warm
    threads = parallel.render_threads()
    times, one_thread = [], []
    for k in range(frames):
        s = 2.0 * k
        x, y, yaw = (float(v[0]) for v in world.road.frenet_to_world(s, 0.5 * (-1) ** k))
        pose = (0.1 * k, x, y, yaw + math.radians(2.0) * (-1) ** k, s)
        started = time.perf_counter()
        renderer.render_from(*pose)
        times.append((time.perf_counter() - started) * 1000.0)
        if threads > 1:
            with parallel.using(1):
                started = time.perf_counter()
                renderer.render_from(*pose)
                one_thread.append((time.perf_counter() - started) * 1000.0)
    result = {
        "median_ms": float(np.median(times)),
        "mean_ms": float(np.mean(times)),
        "min_ms": float(np.min(times)),
        "frames": frames,
        "threads": threads,
    }
    if one_thread:
        result["one_thread_median_ms"] = float(np.median(one_thread))
    return result


def bench_text(render: dict[str, float], episode: dict[str, Any] | None, width: int, height: int) -> str:
    lines = [
        f"renderer {width}x{height}: median {render['median_ms']:.1f} ms, mean {render['mean_ms']:.1f} ms, "
        f"min {render['min_ms']:.1f} ms per frame ({render['frames']} frames, {render['threads']} thread"
        f"{'s' if render['threads'] > 1 else ''})"
    ]
    if "one_thread_median_ms" in render:
        lines.append(
            f"renderer on one thread, the same poses alternately: median {render['one_thread_median_ms']:.1f} ms "
            f"({render['median_ms'] / render['one_thread_median_ms']:.2f} of it on {render['threads']} threads)"
        )
    if episode is not None:
        lines.append(
            f"episode: {episode['simulated_s']:.1f} s simulated in {episode['wall_s']:.1f} s wall = "
            f"{episode['wall_per_sim_s']:.2f} s wall per simulated second ({episode['plans']['made']} plans, "
            f"rendering {episode['render_ms_per_frame']:.1f} ms per frame)"
        )
    return "\n".join(lines) + "\n"
