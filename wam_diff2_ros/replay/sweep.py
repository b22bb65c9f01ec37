"""The latency–quality curve (`wam-diff2-replay --deadline-sweep`): one bag replayed under shrinking deadlines.

First the bag is replayed without a deadline; the median plan time of that run (``timing.total_ms``:
preprocessing and decoding, the first plan's warm-up included) is the reference. Then it is replayed with
``decoding.deadline_ms`` at each fraction of it (:data:`SWEEP_FRACTIONS`). The model is loaded once and shared.
Each run keeps its own outputs under ``--out/<label>/``; the sweep writes ``deadline_curve.json``,
``deadline_curve.md`` (the table) and ``deadline_curve.png`` (the plot) into ``--out``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wam_diff2_ros.core.markup import plot_text, write_page
from wam_diff2_ros.core.tables import figure, markdown_table
from wam_diff2_ros.replay.confidence_analysis import decoding_summary, load_records
from wam_diff2_ros.replay.errors import EXIT_OK
from wam_diff2_ros.replay.settings import ReplayOptions

SWEEP_FRACTIONS = (0.75, 0.5, 0.25, 0.1)
COLUMNS = (
    ("label", "run"),
    ("deadline_ms", "deadline (ms)"),
    ("plans", "plans"),
    ("valid_rate", "valid"),
    ("ade_4s", "ADE 4 s (m)"),
    ("fde_4s", "FDE 4 s (m)"),
    ("mean_confidence", "confidence"),
    ("deadline_met_rate", "deadline met"),
    ("mean_steps_per_block", "steps/block"),
    ("mean_early_tokens", "early tokens"),
    ("median_total_ms", "median plan (ms)"),
)


@dataclass
class SweepResult:
    """The sweep's rows (one per run) and where its files are."""

    exit_code: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    summary: str = ""


class _SharedEngine:
    """The sweep's one engine, handed to every replay; the replays' `close` leaves it open."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        """Kept open for the next run (the sweep closes the engine itself)."""


def deadline_sweep(
    options: ReplayOptions,
    engine_factory: Callable[[Any], Any] | None = None,
    log: Callable[[str], None] | None = None,
    fractions: Sequence[float] = SWEEP_FRACTIONS,
) -> SweepResult:
    """Replay ``options.bag`` unbounded and at ``fractions`` of its median plan time (see the module docstring)."""
    from wam_diff2_ros.replay.loop import replay

    if engine_factory is None:
        from wam_diff2_ros.ros.node import load_engine

        engine_factory = load_engine
    shared: list[Any] = []

    def factory(config: Any) -> Any:
        if not shared:
            shared.append(engine_factory(config))
        return _SharedEngine(shared[0])

    rows: list[dict[str, Any]] = []
    try:
        runs = [("unbounded", None)] + [(f"{round(f * 100)}%", f) for f in fractions]
        reference_ms: float | None = None
        for label, fraction in runs:
            deadline = 0.0 if fraction is None else float(fraction * (reference_ms or 0.0))
            run_options = replace(
                options,
                out=options.out / label.replace("%", "pct"),
                overrides={**options.overrides, "decoding.deadline_ms": deadline},
                plots=False,
            )
            result = replay(run_options, engine_factory=factory, log=log)
            if result.exit_code != EXIT_OK or result.predictions_path is None:
                return SweepResult(result.exit_code, rows, summary=f"run {label} failed: {result.error or ''}\n")
            row = {"label": label, **_row(result.predictions_path, result.metrics)}
            row["deadline_ms"] = deadline
            rows.append(row)
            if fraction is None:
                reference_ms = row["median_total_ms"]
    finally:
        for engine in shared:
            close = getattr(engine, "close", None)
            if callable(close):
                close()
    paths = write_curve(rows, options.out)
    return SweepResult(EXIT_OK, rows, paths, summary=curve_table(rows))


def _row(predictions: Path, metrics: dict[str, Any]) -> dict[str, Any]:
    summary = decoding_summary(load_records(predictions))
    num = metrics.get("num_instants") or 0
    return {
        "plans": summary["plans"],
        "valid_rate": metrics.get("num_valid", 0) / num if num else None,
        "ade_4s": metrics.get("ade_4s"),
        "fde_4s": metrics.get("fde_4s"),
        **{key: summary[key] for key in ("mean_confidence", "deadline_met_rate", "mean_steps_per_block")},
        **{key: summary[key] for key in ("mean_early_tokens", "median_total_ms")},
    }


def curve_table(rows: Sequence[dict[str, Any]]) -> str:
    """The sweep as a Markdown table."""
    cells = [[figure(row.get(key)) for key, _ in COLUMNS] for row in rows]
    return "\n".join(markdown_table([title for _, title in COLUMNS], cells))


def write_curve(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """``deadline_curve.json``, ``.md`` and ``.png`` in ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, table_path, plot_path = (out / f"deadline_curve.{ext}" for ext in ("json", "md", "png"))
    json_path.write_text(json.dumps(list(rows), indent=2) + "\n", encoding="utf-8")
    write_page(table_path, curve_table(rows))
    plot_curve(rows, plot_path)
    return [json_path, table_path, plot_path]


def plot_curve(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Quality (ADE, valid rate, confidence) and timeliness (deadline met, steps per block) per deadline."""
    from wam_diff2_ros.replay.plots import _figure

    fig = _figure(10, 4)
    quality, timing = fig.subplots(1, 2)
    labels = [plot_text(row["label"], 40) for row in rows]
    x = list(range(len(rows)))

    def series(key: str) -> list[float]:
        return [float("nan") if row.get(key) is None else float(row[key]) for row in rows]

    quality.plot(x, series("ade_4s"), "o-", label="ADE 4 s (m)")
    quality.plot(x, series("fde_4s"), "s--", label="FDE 4 s (m)")
    quality.set_ylabel("metres")
    rates = quality.twinx()
    rates.plot(x, series("valid_rate"), "^-", color="tab:green", label="valid rate")
    rates.plot(x, series("mean_confidence"), "v-", color="tab:purple", label="mean confidence")
    rates.set_ylim(0, 1.05)
    quality.legend(loc="upper left", fontsize=8)
    rates.legend(loc="lower left", fontsize=8)
    quality.set_title("quality")
    timing.plot(x, series("mean_steps_per_block"), "o-", label="steps per block")
    timing.set_ylabel("steps per block")
    met = timing.twinx()
    met.plot(x, series("deadline_met_rate"), "^-", color="tab:red", label="deadline met")
    met.set_ylim(0, 1.05)
    timing.legend(loc="upper right", fontsize=8)
    met.legend(loc="lower left", fontsize=8)
    timing.set_title("timeliness")
    for axis in (quality, timing):
        axis.set_xticks(x)
        ticks = [f"{label}\n{figure(row['deadline_ms'])} ms" for label, row in zip(labels, rows, strict=True)]
        axis.set_xticklabels(ticks)
        axis.set_xlabel("deadline (share of the unbounded median plan time)")
    fig.tight_layout()
    fig.savefig(path)
    return path
