"""The policy served over real gRPC and driven by ``carla-driver-interface``'s :class:`FakeLoop` (a straight road,
the ego following each plan exactly): :func:`fake_loop_figures` gives the figures docs/egodriver.md reports
(``wam-diff2-egodriver --fake-loop STEPS``)."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .session import SOURCE_NEW_PLAN, SOURCE_PLAN_IN_FORCE, SOURCE_STOP


@dataclass
class FakeLoopFigures:
    """One fake-loop run: steps, model calls, valid plans, what answered, wall time."""

    steps: int = 0
    plans: int = 0  # drives that made a model call
    valid: int = 0  # of those, valid plans
    answers: dict[str, int] = field(default_factory=dict)  # new plan / plan in force / stop
    errors: dict[str, int] = field(default_factory=dict)  # the drives' errors, by text
    wall_s: float = 0.0
    distance_m: float = 0.0
    final_lateral_m: float = 0.0

    @property
    def plans_per_s(self) -> float:
        """Model calls per wall second of the loop."""
        return self.plans / self.wall_s if self.wall_s > 0 else 0.0

    def text(self) -> str:
        """Human-readable lines."""
        lines = [
            f"steps             : {self.steps}",
            f"model calls       : {self.plans} ({self.plans_per_s:.2f} per wall second, {self.wall_s:.1f} s)",
            f"valid plans       : {self.valid}",
            "answers           : " + ", ".join(f"{n} {k}" for k, n in self.answers.items()),
            f"distance travelled: {self.distance_m:.2f} m, final lateral offset {self.final_lateral_m:+.2f} m",
        ]
        lines += [f"error ({n}x)       : {text}" for text, n in self.errors.items()]
        return "\n".join(lines) + "\n"


def figures_of(result: Any, wall_s: float) -> FakeLoopFigures:
    """The figures of a :class:`~carla_driver_interface.testing.LoopResult` (carla mode: debug payloads parsed)."""
    names = {SOURCE_NEW_PLAN: "new plan", SOURCE_PLAN_IN_FORCE: "plan in force", SOURCE_STOP: "stop"}
    answers: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    figures = FakeLoopFigures(steps=result.steps, wall_s=wall_s)
    for debug in result.debug:
        scalars = dict(debug.scalars) if debug is not None else {}
        figures.plans += int(scalars.get("planned", 0.0) == 1.0)
        figures.valid += int(scalars.get("planned", 0.0) == 1.0 and scalars.get("valid", 0.0) == 1.0)
        answers[names.get(scalars.get("source", -1.0), "unknown")] += 1
        errors.update(key[len("error: ") :] for key in scalars if key.startswith("error: "))
    figures.answers = dict(answers.most_common())
    figures.errors = dict(errors.most_common(5))
    final = result.ego.poses[-1].position
    figures.distance_m, figures.final_lateral_m = float(final[0]), float(final[1])
    return figures


def fake_loop_figures(
    policy: Any, steps: int, width: int = 320, height: int = 180, initial_speed_mps: float = 5.0
) -> FakeLoopFigures:
    """Serve ``policy`` on a private unix socket (carla mode) and drive it ``steps`` steps of 0.1 s."""
    from carla_driver_interface.server import serving
    from carla_driver_interface.testing import FakeCamera, FakeLoop

    with tempfile.TemporaryDirectory(prefix="wam-egodriver-") as folder:
        address = f"unix:{Path(folder) / 'policy.sock'}"
        with serving(policy, host=address, mode="carla"):
            camera = FakeCamera(width=width, height=height)
            with FakeLoop(address, [camera], initial_speed_mps=initial_speed_mps) as loop:
                started = time.perf_counter()
                result = loop.run(steps)
                wall_s = time.perf_counter() - started
    return figures_of(result, wall_s)
