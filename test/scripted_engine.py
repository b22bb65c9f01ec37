"""The scripted engine: a test double of :class:`wam_diff2_ros.core.engine.Engine` (no ROS, no model) for the
planning pipeline, the runtime and the node.

The scripted engine answers like a trained model would, computed from the prompt, so the ROS layer can
be tested with valid plans before a trained checkpoint exists:

* planning prompt → 8 waypoints ``x = max(vx, 1)·t``, ``y = ±0.05·x²`` for left/right, 0 for straight;
  command ``unknown`` → an unparseable answer; ``vx > 50`` (velocity in the prompt) → RuntimeError;
* detection prompt → two boxes (car 100,200,400,600 and pedestrian 600,300,700,800 with score 0.8, on the
  0..1000 grid);
* anything else (VQA) → ``I see N image(s), the first is WxH.``; a question containing ``sleep <s>`` sleeps
  that long first, one containing ``raise`` raises RuntimeError.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DETECTION_BOXES = (("car", (100, 200, 400, 600), None), ("pedestrian", (600, 300, 700, 800), 0.8))
WAYPOINT_TIMES = tuple(0.5 * (i + 1) for i in range(8))


@dataclass
class ScriptedTiming:
    """Stage timing as the real engine reports it (seconds)."""

    preprocess_s: float = 0.002
    vision_s: float = 0.003
    prefill_s: float = 0.004
    denoise_s: float = 0.010
    commit_s: float = 0.001
    total_s: float = 0.020


@dataclass
class ScriptedGeneration:
    """What :meth:`ScriptedEngine.generate` returns (the fields the pipeline reads)."""

    text: str
    steps_per_block: list[int] = field(default_factory=lambda: [3, 2])
    finished: bool = True
    timing: ScriptedTiming = field(default_factory=ScriptedTiming)


def scripted_plan(command: str, vx: float) -> list[tuple[float, float]]:
    """The waypoints the scripted engine answers for ``command`` at forward speed ``vx``."""
    speed = max(vx, 1.0)
    sign = {"left": 1.0, "right": -1.0}.get(command, 0.0)
    return [(speed * t, sign * 0.05 * (speed * t) ** 2) for t in WAYPOINT_TIMES]


class ScriptedEngine:
    """Test double of :class:`wam_diff2_ros.core.engine.Engine` (see the module docstring)."""

    name = "scripted-engine"
    device = "cpu"
    dtype = "float32"

    def __init__(self, config: Any = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.closed = False
        self._lock = threading.Lock()

    def generate(
        self,
        prompt: str,
        images: Sequence[Any] = (),
        decode: Any = None,
        system: str | None = None,
        started_ns: int | None = None,
    ) -> Any:
        """Answer ``prompt`` (see the module docstring); ``started_ns`` (a deadline's start) is ignored."""
        with self._lock:
            if self.closed:
                raise RuntimeError("engine is closed")
            self.calls.append({"prompt": prompt, "images": list(images), "decode": decode, "system": system})
            if "Locate every instance" in prompt:
                entries = []
                for label, box, score in DETECTION_BOXES:
                    entry = f'{{"bbox_2d": [{", ".join(str(v) for v in box)}], "label": "{label}"'
                    entries.append(entry + (f', "score": {score}}}' if score is not None else "}"))
                return ScriptedGeneration("```json\n[" + ", ".join(entries) + "]\n```")
            command = re.search(r"navigation information is: (\w+)", prompt)
            if command:
                velocity = re.search(r"velocity is: \(([-\d.]+),([-\d.]+)\)", prompt)
                vx = float(velocity.group(1)) if velocity else 0.0
                if vx > 50:
                    raise RuntimeError(f"scripted engine failure (vx={vx})")
                if command.group(1) == "unknown":
                    return ScriptedGeneration("I cannot plan without a route")
                points = scripted_plan(command.group(1), vx)
                return ScriptedGeneration(", ".join(f"{x:.2f}, {y:.2f}" for x, y in points))
            question = prompt.replace("<image>", "")
            sleep = re.search(r"sleep ([\d.]+)", question)
            if sleep:
                time.sleep(float(sleep.group(1)))
            if "raise" in question:
                raise RuntimeError("scripted engine failure (question)")
            first = np.asarray(images[0]) if images else None
            size = f"{first.shape[1]}x{first.shape[0]}" if first is not None else "none"
            return ScriptedGeneration(f"I see {len(images)} image(s), the first is {size}.<|im_end|>")

    def close(self) -> None:
        """Mark closed (later calls raise, as the real engine's do)."""
        with self._lock:
            self.closed = True
