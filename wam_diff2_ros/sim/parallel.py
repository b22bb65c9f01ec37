"""A small thread pool for the renderer's independent pixel chunks: numpy releases the GIL inside its array
operations, so chunks shaded on two threads take about half the time on two cores and give the same bytes (each
chunk is computed by the same operations in the same order, whichever thread runs it)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

THREADS_ENV = "WAM_DIFF2_RENDER_THREADS"
MAX_THREADS = 2  # more threads than this gain little: the chunks are small and Python runs between operations

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (threads, pool)


def _positive(name: str, strict: bool) -> int | None:
    """The positive integer in ``$name``; None when unset (or, not `strict`, when it is something else)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        if strict:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
        return None
    return threads


def render_threads() -> int:
    """Threads the renderer shades with: ``$WAM_DIFF2_RENDER_THREADS`` if set (1: no pool); else the CPUs this
    process may use, at most :data:`MAX_THREADS` and at most ``$OMP_NUM_THREADS`` when that is set (the thread
    budget a process is given, e.g. one per Ray worker)."""
    explicit = _positive(THREADS_ENV, strict=True)
    if explicit is not None:
        return explicit
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    budget = _positive("OMP_NUM_THREADS", strict=False) or available  # OpenMP also allows lists
    return max(1, min(MAX_THREADS, available, budget))


def run_all(task: Callable[[int], None], items: Iterable[int]) -> None:
    """Call ``task(i)`` for every item, on the shared pool when there is more than one thread; exceptions are
    raised here."""
    global _pool
    items = list(items)
    threads = render_threads()
    if threads == 1 or len(items) < 2:
        for item in items:
            task(item)
        return
    with _lock:
        if _pool is None or _pool[0] != threads:  # made anew when the setting changes
            if _pool is not None:
                _pool[1].shutdown(wait=False)
            _pool = (threads, ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wam_diff2_render"))
        pool = _pool[1]
    for future in [pool.submit(task, item) for item in items]:
        future.result()
