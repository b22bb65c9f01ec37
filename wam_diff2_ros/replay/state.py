"""The state of one replay run and its result (:class:`ReplayResult`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ReplayResult:
    """What a replay produced (paths, counts, metrics) and its exit code."""

    exit_code: int
    out_dir: Path
    bag_path: Path | None = None
    predictions_path: Path | None = None
    metrics_path: Path | None = None
    report_path: Path | None = None  # report.html (None when it could not be written)
    summary_path: Path | None = None
    plots: list[Path] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    error: str | None = None
    odometry: list[tuple[int, float, float, float]] = field(default_factory=list)  # the ground truth's samples


class NoTrack:
    """Stands in for an :class:`EgoTrack` when the bag has no usable odometry: no ground truth anywhere."""

    def future_in_ego_frame(self, t_ns: int, horizons_s: Sequence[float] = ()) -> None:
        return None


@dataclass
class Run:
    """Mutable state of one replay."""

    log: Callable[[str], None]
    bag_start_ns: int | None = None
    last_stamp_ns: int | None = None
    messages_read: int = 0
    messages_fed: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    decode_errors: int = 0
    first_decode_error: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    num_planned: int = 0
    num_valid: int = 0
    detections: int = 0
    odometry: list[tuple[int, float, float, float]] = field(default_factory=list)
    engine_errors: int = 0
    consecutive_errors: int = 0
    bag_error: str | None = None
    fatal: str | None = None
    interrupted: bool = False
    view: Any = None  # a ReplayView with --serve (replay/serve.py)

    @property
    def num_blocked(self) -> int:
        return len(self.records) - self.num_planned
