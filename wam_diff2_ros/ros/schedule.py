"""When the planner works: one rule for the live node and the replay.

The rule (:class:`Cadence`):

* planning every ``1 / planning.rate_hz`` from the start (the node: a ROS timer created at activation, on the
  node clock; the replay: from the replay window's start, on the bag clock); ``planning.rate_hz`` 0 = at each
  accepted front image (camera 0);
* detection every ``1 / detection.rate_hz`` likewise (0 = never);
* work due together runs in :data:`ORDER`: planning, then a question's answer, then detection, so neither
  starves the other.

The node drives the rule from timers and its image callback (:meth:`Cadence.timers`,
:meth:`Cadence.plans_on_image`; the due flags live in :class:`~.worker.Worker`, which takes them in
:data:`ORDER`); the replay turns it into bag-time instants (:class:`InstantSchedule`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from wam_diff2_ros.core.units import NS_PER_S

#: The order in which work that is due together runs.
ORDER = ("plan", "answer", "detect")


def period_ns(rate_hz: float) -> int:
    """The period of a rate in ns (0 for rate 0: no periodic instants)."""
    return round(NS_PER_S / rate_hz) if rate_hz > 0 else 0


@dataclass(frozen=True)
class Cadence:
    """The planning and detection rates of one configuration (see the module docstring)."""

    plan_rate_hz: float
    detect_rate_hz: float = 0.0

    @property
    def plan_period_ns(self) -> int:
        """Planning period (0: plan on each front image)."""
        return period_ns(self.plan_rate_hz)

    @property
    def detect_period_ns(self) -> int:
        """Detection period (0: no detection)."""
        return period_ns(self.detect_rate_hz)

    def plans_on_image(self, camera_index: int | None) -> bool:
        """Whether an accepted image of camera ``camera_index`` makes planning due (rate 0, front camera)."""
        return self.plan_rate_hz == 0 and camera_index == 0

    def timers(self) -> list[tuple[str, float]]:
        """``(kind, period_s)`` of the periodic work, in :data:`ORDER` (the node's timers)."""
        periods = {"plan": self.plan_period_ns, "detect": self.detect_period_ns}
        return [(kind, periods[kind] / NS_PER_S) for kind in ORDER if periods.get(kind)]


class InstantSchedule:
    """The node's instants on the bag clock (the replay).

    ``rate_hz > 0``: at ``start + k / rate_hz`` (k ≥ 1), as a ROS timer created at ``start``. ``rate_hz == 0``:
    at the receive time of each front image (:meth:`image`). Detection likewise at ``detect_rate_hz``.
    An instant at time t runs once every message received at or before t has been fed.
    """

    def __init__(self, start_ns: int, rate_hz: float, detect_rate_hz: float = 0.0) -> None:
        self.cadence = Cadence(rate_hz, detect_rate_hz)
        self.start_ns = start_ns
        self.plan_period_ns = self.cadence.plan_period_ns
        self.detect_period_ns = self.cadence.detect_period_ns
        self._next_plan = start_ns + self.plan_period_ns if self.plan_period_ns else None
        self._next_detect = start_ns + self.detect_period_ns if self.detect_period_ns else None
        self._image_plan: int | None = None

    def image(self, camera_index: int, receive_ns: int) -> None:
        """An image of camera ``camera_index`` was accepted (planning rate 0: plan at a front image's receive
        time)."""
        if self.cadence.plans_on_image(camera_index) and self._image_plan is None:
            self._image_plan = receive_ns

    def front_image(self, receive_ns: int) -> None:
        """A front image was accepted (:meth:`image` of camera 0)."""
        self.image(0, receive_ns)

    def due(self, before_ns: int) -> Iterator[tuple[int, str]]:
        """``(t_ns, "plan"|"detect")`` for the instants earlier than ``before_ns``, in time order (:data:`ORDER`
        at equal times). Call it with a message's receive time before feeding that message, and with the last
        receive time + 1 at the end of the bag."""
        while True:
            plan_at = self._image_plan if self._image_plan is not None else self._next_plan
            options = ((plan_at, ORDER.index("plan"), "plan"), (self._next_detect, ORDER.index("detect"), "detect"))
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
