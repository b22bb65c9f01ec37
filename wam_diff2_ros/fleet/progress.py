"""The fleet's progress lines on stderr: bags done / total, plans per second, ETA, and each worker's bag."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TextIO

from wam_diff2_ros.fleet.pool import Slot
from wam_diff2_ros.fleet.results import FAILED, BagRecord

REFRESH_S = 10.0  # a status line at least this often while bags run


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class FleetProgress:
    """Counts bags and plans as they finish; prints a line on each event and every ``REFRESH_S`` seconds.

    The ETA is the bytes still to replay over the bytes per second replayed so far (bags differ in length).
    """

    def __init__(self, total: int, skipped: int, failed: int, todo_bytes: int, stream: TextIO, enabled: bool) -> None:
        self.total = total
        self.skipped = skipped
        self.failed = failed
        self.replayed = 0
        self.plans = 0
        self.todo_bytes = todo_bytes
        self.done_bytes = 0
        self.stream = stream
        self.enabled = enabled
        self.started_s = time.perf_counter()
        self.printed_s = 0.0

    @property
    def finished(self) -> int:
        return self.skipped + self.failed + self.replayed

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started_s

    def plans_per_s(self) -> float:
        return self.plans / max(self.elapsed_s(), 1e-9)

    def eta_s(self) -> float | None:
        if self.done_bytes <= 0:
            return None
        rate = self.done_bytes / max(self.elapsed_s(), 1e-9)
        return max(0.0, self.todo_bytes - self.done_bytes) / rate

    def started(self, slot: Slot) -> None:
        assert slot.task is not None
        retry = f" (attempt {slot.attempt})" if slot.attempt > 1 else ""
        self._print(f"fleet: {slot.label} starts {slot.task.name}{retry}")

    def finished_bag(self, slot: Slot, record: BagRecord) -> None:
        self.done_bytes += record.size_bytes
        if record.status == FAILED:
            self.failed += 1
        else:
            self.replayed += 1
        self.plans += record.plans
        outcome = record.status if record.reason is None else f"{record.status}: {record.reason}"
        self._print(f"fleet: {slot.label} {record.name}: {outcome} ({record.plans} plans, {record.wall_s:.1f} s)")
        self._print(self.line())

    def tick(self, slots: Sequence[Slot], force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.printed_s < REFRESH_S:
            return
        workers = " · ".join(
            f"{s.label} {s.task.name} {now - s.started_s:.0f}s ({s.done} done)"
            if s.task is not None
            else f"{s.label} idle ({s.done} done)"
            for s in slots
        )
        self.printed_s = now
        self._print(self.line() + (f" | {workers}" if workers else ""))

    def line(self) -> str:
        """The run's state in one line."""
        return (
            f"fleet: {self.finished}/{self.total} bags ({self.skipped} skipped, {self.failed} failed), "
            f"{self.plans} plans, {self.plans_per_s():.2f} plans/s, {_duration(self.elapsed_s())} elapsed, "
            f"ETA {_duration(self.eta_s())}"
        )

    def _print(self, text: str) -> None:
        if self.enabled:
            print(text, file=self.stream, flush=True)
