"""core.tables: the one number and table formatting of the reports (replay, fleet, bench)."""

from __future__ import annotations

import pytest

from wam_diff2_ros.core.tables import figure, markdown_table, number, percent, text_row

pytestmark = pytest.mark.core


def test_numbers_and_missing_values() -> None:
    assert number(1.23456) == "1.23" and number(3.0, 0, " ms") == "3 ms" and number(None) == "–"
    assert number(None, missing="n/a") == "n/a" and percent(0.25) == "25.0 %" and percent(None) == "–"
    assert [figure(v) for v in (0.012345, 123.4, 7, None, "unbounded")] == ["0.0123", "123", "7", "–", "unbounded"]


def test_tables() -> None:
    assert markdown_table(["a", "b"], [["x|y", "two\nlines"]]) == [
        "| a | b |",
        "|---|---|",
        "| x\\|y | two lines |",
        "",
    ]
    assert text_row("p50 ms", ["exact", None, 1.5]) == f"{'p50 ms':<24}{'exact':>14}{'-':>14}{'1.50':>14}"
