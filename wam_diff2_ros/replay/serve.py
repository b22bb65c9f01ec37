"""``wam-diff2-replay --serve``: the replay's plans on the live Foxglove view (:class:`ReplayView`).

The view (:class:`wam_diff2_ros.viewer.LiveView`) starts before the first message is read and the replay waits
for a client to subscribe (Ctrl-C stops the wait), so a viewer sees the drive from its start. Planning instants
are paced on the bag clock: ``speed`` 1 is real time, 2 twice as fast, 0 as fast as the model goes. The cost of
handing each plan to the view on the replay's (planning) thread is measured and logged at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from wam_diff2_ros.core.units import NS_PER_S
from wam_diff2_ros.replay.errors import ReplayUsageError
from wam_diff2_ros.replay.interrupts import INTERRUPTS
from wam_diff2_ros.replay.records import SCHEDULE_DELAY

WAIT_SLICE_S = 0.2


class ReplayView:
    """The replay's live view, its pacing and the measured hand-off cost."""

    def __init__(self, view: Any, speed: float, log: Callable[[str], None]) -> None:
        self.view = view
        self.speed = speed
        self.log = log
        self.submit_us: list[float] = []
        self._origin: tuple[int, float] | None = None  # (bag ns, wall s) of the first instant

    def wait_for_client(self) -> None:
        """Block until a client subscribes (interruptible)."""
        self.log(f"live view: {self.view.url} (Foxglove WebSocket; open it in Foxglove or Lichtblick)")
        self.log("live view: waiting for a client to subscribe (Ctrl-C to stop)")
        while not self.view.wait_for_client(WAIT_SLICE_S):
            INTERRUPTS.check()
        self.log("live view: a client subscribed; replaying")

    def pace(self, t_ns: int) -> None:
        """Sleep until bag time ``t_ns`` is due on the wall clock at ``speed`` (no wait at speed 0)."""
        if self.speed <= 0:
            return
        if self._origin is None:
            self._origin = (t_ns, time.monotonic())
            return
        bag_ns, wall_s = self._origin
        due = wall_s + (t_ns - bag_ns) / NS_PER_S / self.speed
        while (left := due - time.monotonic()) > 0:
            time.sleep(min(left, WAIT_SLICE_S))
            INTERRUPTS.check()

    def submit(self, cycle: Any, t_ns: int) -> None:
        """Hand one planning instant to the view, timing the hand-off."""
        started = time.perf_counter()
        self.view.submit(replace(cycle.view_update(t_ns), delay_name=SCHEDULE_DELAY))
        self.submit_us.append((time.perf_counter() - started) * 1e6)

    def close(self) -> None:
        """Stop the view; log what it cost the planning thread."""
        self.view.close()
        if self.submit_us:
            ordered = sorted(self.submit_us)
            p50, worst = ordered[len(ordered) // 2], ordered[-1]
            self.log(
                f"live view: {len(ordered)} plan(s) handed over, {self.view.dropped} replaced before drawn; "
                f"hand-off on the planning thread p50 {p50:.0f} µs, max {worst:.0f} µs"
            )


def open_view(port: int, speed: float, host: str, camera_pose: Any, log: Callable[[str], None]) -> ReplayView:
    """Start the live view on ``host:port`` and wait for its first client (raises :class:`ReplayUsageError`
    when it cannot start)."""
    from wam_diff2_ros.viewer import LiveView, ViewerSettings, ViewerUnavailableError

    if speed < 0:
        raise ReplayUsageError("--serve-speed must be >= 0 (1 = real time, 0 = as fast as it goes)")
    try:
        view = LiveView(ViewerSettings(port, host), camera_pose, name="wam-diff2-replay")
        view.start()
    except (ValueError, ViewerUnavailableError) as exc:
        raise ReplayUsageError(f"--serve: {exc}") from None
    served = ReplayView(view, speed, log)
    try:
        served.wait_for_client()
    except BaseException:
        view.close()
        raise
    return served
