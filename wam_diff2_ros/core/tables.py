"""Numbers and tables as the reports write them (the replay's summary and deadline curve, the fleet report, the
benchmark's table): one formatting for every report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wam_diff2_ros.core.markup import markdown_cell

MISSING = "–"


def number(value: float | None, digits: int = 2, unit: str = "", missing: str = MISSING) -> str:
    """``value`` with ``digits`` decimals and ``unit``; ``missing`` for None."""
    return missing if value is None else f"{value:.{digits}f}{unit}"


def percent(value: float | None, missing: str = MISSING) -> str:
    """A fraction as a percentage with one decimal (``0.25`` → ``25.0 %``); ``missing`` for None."""
    return missing if value is None else f"{100.0 * value:.1f} %"


def figure(value: Any) -> str:
    """A table cell of mixed values: floats to 3 significant digits (whole numbers from 100 on), None ``–``."""
    if value is None:
        return MISSING
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A Markdown table's lines (every cell through :func:`~wam_diff2_ros.core.markup.markdown_cell`), then an
    empty line."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def text_row(label: str, cells: Sequence[float | str | None], digits: int = 2, label_width: int = 24) -> str:
    """A fixed-width text row: the label, then one right-aligned column of 14 per cell (``-`` for None)."""
    shown = ("-" if c is None else c if isinstance(c, str) else f"{c:.{digits}f}" for c in cells)
    return f"{label:<{label_width}}" + "".join(f"{c:>14}" for c in shown)
