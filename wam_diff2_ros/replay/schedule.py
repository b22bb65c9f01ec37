"""When the replay plans: the node's planning instants on the bag clock (:class:`InstantSchedule`).

Kept in its own module so that a later stage can share the schedule with the node's timers.
"""

from __future__ import annotations

from collections.abc import Iterator

from wam_diff2_ros.core.observation import NS_PER_S


class InstantSchedule:
    """When the node would plan (and detect), on the bag clock.

    ``rate_hz > 0``: at ``start + k / rate_hz`` (k ≥ 1), as a ROS timer created at ``start``. ``rate_hz == 0``:
    at the receive time of each front image (:meth:`front_image`). Detection likewise at ``detect_rate_hz``.
    An instant at time t runs once every message received at or before t has been fed.
    """

    def __init__(self, start_ns: int, rate_hz: float, detect_rate_hz: float = 0.0) -> None:
        self.start_ns = start_ns
        self.plan_period_ns = round(NS_PER_S / rate_hz) if rate_hz > 0 else 0
        self.detect_period_ns = round(NS_PER_S / detect_rate_hz) if detect_rate_hz > 0 else 0
        self._next_plan = start_ns + self.plan_period_ns if self.plan_period_ns else None
        self._next_detect = start_ns + self.detect_period_ns if self.detect_period_ns else None
        self._image_plan: int | None = None

    def front_image(self, receive_ns: int) -> None:
        """A front image arrived (planning rate 0: plan at its receive time)."""
        if not self.plan_period_ns and self._image_plan is None:
            self._image_plan = receive_ns

    def due(self, before_ns: int) -> Iterator[tuple[int, str]]:
        """``(t_ns, "plan"|"detect")`` for the instants earlier than ``before_ns``, in time order (planning first
        at equal times). Call it with a message's receive time before feeding that message, and with the last
        receive time + 1 at the end of the bag."""
        while True:
            plan_at = self._image_plan if self._image_plan is not None else self._next_plan
            options = ((plan_at, 0, "plan"), (self._next_detect, 1, "detect"))
            candidates = [(t, order, kind) for t, order, kind in options if t is not None]
            if not candidates:
                return
            t, _, kind = min(candidates)
            if t >= before_ns:
                return
            if kind == "detect":
                self._next_detect = t + self.detect_period_ns
            elif self._image_plan is not None:
                self._image_plan = None
            else:
                self._next_plan = t + self.plan_period_ns
            yield t, kind
