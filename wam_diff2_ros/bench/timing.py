"""Timing loops the bench's measurements share: CUDA-event timing of replays, host wall-clock timing."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch


def median_ms(function: Any, repeats: int) -> float:
    """Median milliseconds of `function()` on the current stream (CUDA events, after 3 warm-up calls)."""
    for _ in range(3):
        function()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def host_ms(function: Any, repeats: int) -> tuple[float, float]:
    """(median, best) wall-clock milliseconds of `function()` after one warm-up call (host timing, any device)."""
    function()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times), min(times)
