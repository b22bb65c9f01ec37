"""The renderer shades its ground chunks on a small thread pool (:mod:`wam_diff2_ros.sim.parallel`): the frames
must be the same bytes with one thread and with two, and the thread count follows the environment."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from wam_diff2_ros.drive.vehicle import VehicleLimits
from wam_diff2_ros.drive.world import build_world, load_scenarios
from wam_diff2_ros.sim import parallel
from wam_diff2_ros.sim.render import Renderer
from wam_diff2_ros.sim.scenario import Scenario


def _frames(monkeypatch: pytest.MonkeyPatch, threads: int) -> list[np.ndarray]:
    monkeypatch.setenv(parallel.THREADS_ENV, str(threads))
    frames = [Renderer(Scenario(25.0, 0), 960, 540).render(t) for t in (0.0, 9.5)]
    renderer = Renderer(build_world(load_scenarios("stopped_in_lane")[0], VehicleLimits()), 640, 360)
    x, y, yaw = (float(v[0]) for v in renderer.sc.road.frenet_to_world(64.5, 0.3))
    frames.append(renderer.render_from(6.0, x, y, yaw - 0.05, 64.5))  # the stopped car near, off the lane centre
    return frames


def test_two_threads_render_the_same_bytes_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    one = _frames(monkeypatch, 1)
    two = _frames(monkeypatch, 2)
    assert any(t.name.startswith("wam_diff2_render") for t in threading.enumerate())  # the pool did the work
    for a, b in zip(one, two, strict=True):
        assert a.dtype == np.uint8 and a.shape == b.shape
        assert np.array_equal(a, b)
    assert one[0].std() > 10  # a real frame, not a blank one


def test_thread_count_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert parallel.render_threads() == 1  # a process given one thread (e.g. a Ray worker) renders on one
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")  # an OpenMP nesting list: not a budget, ignored
    assert 1 <= parallel.render_threads() <= parallel.MAX_THREADS
    monkeypatch.setenv(parallel.THREADS_ENV, "3")
    assert parallel.render_threads() == 3
    for bad in ("0", "two"):
        monkeypatch.setenv(parallel.THREADS_ENV, bad)
        with pytest.raises(ValueError, match=parallel.THREADS_ENV):
            parallel.render_threads()


def test_a_failing_chunk_raises_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.THREADS_ENV, "2")
    done: list[int] = []

    def task(i: int) -> None:
        if i == 3:
            raise RuntimeError("chunk 3 failed")
        done.append(i)

    with pytest.raises(RuntimeError, match="chunk 3 failed"):
        parallel.run_all(task, range(6))
    assert sorted(done) == [0, 1, 2, 4, 5]
