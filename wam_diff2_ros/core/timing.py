"""The one timing type: milliseconds per stage of one inference, from the decoder to `InferenceTiming.msg`.

The decoder measures seconds (`time.perf_counter`); :meth:`StageTiming.from_seconds` converts once, and the
``*_s`` properties / :meth:`StageTiming.seconds` give seconds back where a record is written in seconds
(`wam-diff2-infer`, the benchmark). Replay records (:meth:`milliseconds`) and the ROS message
(`ros.outputs.timing_msg`) read the same fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

#: The measured stages, in pipeline order (``total`` covers them all).
STAGES = ("preprocess", "vision", "prefill", "denoise", "commit", "total")


def _ms(seconds: Any) -> float:
    """Seconds -> milliseconds; a missing or non-finite value is 0."""
    if seconds is None:
        return 0.0
    value = float(seconds)
    return value * 1000.0 if math.isfinite(value) else 0.0


@dataclass(frozen=True)
class StageTiming:
    """Milliseconds per stage of one inference (``end_to_end_ms`` is filled in when publishing)."""

    preprocess_ms: float = 0.0
    vision_ms: float = 0.0
    prefill_ms: float = 0.0
    denoise_ms: float = 0.0
    commit_ms: float = 0.0
    total_ms: float = 0.0
    end_to_end_ms: float = 0.0

    @classmethod
    def from_seconds(
        cls,
        preprocess: float = 0.0,
        vision: float = 0.0,
        prefill: float = 0.0,
        denoise: float = 0.0,
        commit: float = 0.0,
        total: float = 0.0,
    ) -> StageTiming:
        """From seconds per stage (what the decoder measures)."""
        return cls(_ms(preprocess), _ms(vision), _ms(prefill), _ms(denoise), _ms(commit), _ms(total))

    @classmethod
    def from_generation(cls, generation: Any, wall_s: float | None = None) -> StageTiming:
        """From a generation's ``timing`` (a StageTiming, or any object with ``*_s`` seconds); ``wall_s``
        replaces a missing total."""
        timing = getattr(generation, "timing", None)
        if isinstance(timing, StageTiming):
            result = timing
        else:
            result = cls.from_seconds(*(getattr(timing, f"{stage}_s", 0.0) for stage in STAGES))
        if result.total_ms == 0.0 and wall_s is not None:
            result = replace(result, total_ms=wall_s * 1000.0)
        return result

    def with_preprocess(self, preprocess_s: float) -> StageTiming:
        """A copy with the preprocessing stage (seconds) added, and counted in the total."""
        extra = _ms(preprocess_s)
        return replace(self, preprocess_ms=extra, total_ms=self.total_ms + extra)

    def with_end_to_end(self, end_to_end_ms: float) -> StageTiming:
        """A copy with ``end_to_end_ms`` set."""
        return replace(self, end_to_end_ms=float(end_to_end_ms))

    @property
    def preprocess_s(self) -> float:
        return self.preprocess_ms / 1000.0

    @property
    def vision_s(self) -> float:
        return self.vision_ms / 1000.0

    @property
    def prefill_s(self) -> float:
        return self.prefill_ms / 1000.0

    @property
    def denoise_s(self) -> float:
        return self.denoise_ms / 1000.0

    @property
    def commit_s(self) -> float:
        return self.commit_ms / 1000.0

    @property
    def total_s(self) -> float:
        return self.total_ms / 1000.0

    def seconds(self) -> dict[str, float]:
        """``{"preprocess_s": ..., "total_s": ...}``: the stages in seconds (no end-to-end)."""
        return {f"{stage}_s": getattr(self, f"{stage}_ms") / 1000.0 for stage in STAGES}

    def milliseconds(self) -> dict[str, float]:
        """``{"preprocess_ms": ..., "end_to_end_ms": ...}``: every field, as records and messages name them."""
        return {f"{stage}_ms": getattr(self, f"{stage}_ms") for stage in (*STAGES, "end_to_end")}

    def summary(self) -> str:
        """One log line: ``total 812 ms (pre 50, vision 128, prefill 38, denoise 577, commit 5)``."""
        return (
            f"total {self.total_ms:.0f} ms (pre {self.preprocess_ms:.0f}, vision {self.vision_ms:.0f}, "
            f"prefill {self.prefill_ms:.0f}, denoise {self.denoise_ms:.0f}, commit {self.commit_ms:.0f})"
            + (f", end-to-end {self.end_to_end_ms:.0f} ms" if self.end_to_end_ms else "")
        )
