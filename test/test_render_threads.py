"""The renderer shades on several threads: its frames must not depend on how many, nor on other renderers rendering
at the same time in other threads, nor on a fork (the pool is made again in the child)."""

from __future__ import annotations

import math
import multiprocessing
import threading

import numpy as np
import pytest
from test_render_digests import case_names, digest

from wam_diff2_ros.drive.vehicle import VehicleLimits
from wam_diff2_ros.drive.world import build_world, load_scenarios
from wam_diff2_ros.sim.render import Renderer, default_threads
from wam_diff2_ros.sim.scenario import Scenario

# Rows both sky and ground (640x360), actors crossing the near plane and the image edge, a turn, the sample drive.
CASES = [
    name
    for name in case_names()
    if any(
        part in name
        for part in (
            "straight_10:t3.1",
            "stopped_in_lane:t6.6",
            "stopped_in_lane:t7.0",
            "left_r20:t6.0",
            "lead_slower:t4.0",
            "sample:seed0:t9.5",
        )
    )
]


def make_renderer(name: str, threads: int) -> Renderer:
    kind, *fields, size = name.split(":")
    width, height = (int(v) for v in size.split("x"))
    world = (
        Scenario(25.0, int(fields[0][4:]))
        if kind == "sample"
        else build_world(load_scenarios(fields[0])[0], VehicleLimits())
    )
    return Renderer(world, width, height, threads=threads)


def render(renderer: Renderer, name: str) -> np.ndarray:
    """The frame of the case ``name`` (as the digest test renders it) from ``renderer``."""
    kind, *fields, _ = name.split(":")
    if kind == "sample":
        return renderer.render(float(fields[1][1:]))
    t, s, d, heading = (float(f[1:]) for f in fields[1:])
    x, y, yaw = (float(v[0]) for v in renderer.sc.road.frenet_to_world(s, d))
    return renderer.render_from(t, x, y, yaw + math.radians(heading), s)


def frames(renderer: Renderer, names: list[str]) -> list[str]:
    """Digests of the cases rendered one after another by one renderer (its canvases carry over)."""
    return [digest(render(renderer, name)) for name in names]


def test_cases_cover_what_they_should() -> None:
    assert len(CASES) == 18 and any("640x360" in n for n in CASES) and any("sample" in n for n in CASES)


@pytest.mark.parametrize("threads", [2, 3])
def test_frames_do_not_depend_on_the_threads(threads: int) -> None:
    for name in CASES:
        one, many = make_renderer(name, 1), make_renderer(name, threads)
        assert many.threads == threads and one.threads == 1
        assert frames(one, [name] * 2) == frames(many, [name] * 2), name  # twice: the canvases are reused
        assert one._pool is None and many._pool is not None  # the helpers did run


def test_renderers_in_two_threads_at_once() -> None:
    """Two renderers, each used by its own thread at the same time, give the frames they give one at a time."""
    names = [n for n in CASES if "960x540" in n and "drive" in n]
    expected = frames(make_renderer(names[0], 1), names[:1] * 2), frames(make_renderer(names[-1], 1), names[-1:] * 2)
    results: dict[int, list[str]] = {}

    def run(index: int, name: str) -> None:
        renderer = make_renderer(name, 2)
        results[index] = [d for _ in range(3) for d in frames(renderer, [name] * 2)]

    workers = [threading.Thread(target=run, args=(i, n)) for i, n in enumerate((names[0], names[-1]))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert results == {0: expected[0] * 3, 1: expected[1] * 3}


_FORKED: dict[str, Renderer] = {}  # the renderer a forked child inherits (a renderer does not pickle)


def _render_in_child(name: str) -> str:
    return frames(_FORKED[name], [name])[0]


def test_a_forked_child_renders_with_a_pool_of_its_own() -> None:
    name = next(n for n in CASES if "320x180" in n)
    _FORKED[name] = make_renderer(name, 2)
    expected = frames(_FORKED[name], [name])  # the parent's pool exists now; its thread is not in the child
    try:
        with multiprocessing.get_context("fork").Pool(1) as pool:
            assert pool.apply_async(_render_in_child, (name,)).get(timeout=120) == expected[0]
    finally:
        _FORKED.clear()


def test_thread_counts() -> None:
    with pytest.raises(ValueError, match="at least 1 thread"):
        Renderer(Scenario(5.0, 0), 64, 36, threads=0)


def test_default_threads_follow_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert 1 <= default_threads() <= 2
