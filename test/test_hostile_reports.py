"""Every page and Markdown report the package writes, fed hostile strings (markup, ``|``, line breaks that would
start a heading, lone surrogates, megabyte texts) and non-finite numbers: each comes out whole (never an exception
or an empty file), with no live markup, every table row with its columns, and long texts shortened on the page
while the records keep them. A last test finds every writer of a ``.md`` / ``.html`` file in the package, so a new
one cannot skip this."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from wam_diff2_ros.core.markup import PAGE_TEXT_CHARS

REPO = Path(__file__).resolve().parents[1]
LONG = "L" * 1_000_000
HOSTILE = [
    "</script><script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    "a|b|c",
    "line\n# injected heading\n| x | y |",
    "lone \ud800 surrogate \udfff",
    "sep\u2028arator",
    "__DATA__ __TITLE__",
    LONG,
]
NAN, INF = float("nan"), float("inf")
#: the modules that write a page or a Markdown report, each walked by a test below
WRITERS = {
    "wam_diff2_ros/replay/report_page.py": "test_replay_report_page",
    "wam_diff2_ros/replay/report.py": "test_replay_report_page (summary.txt: plain text)",
    "wam_diff2_ros/replay/sweep.py": "test_deadline_curve_table",
    "wam_diff2_ros/fleet/report.py": "test_fleet_markdown_report",
    "wam_diff2_ros/drive/report.py": "test_drive_report_page",
    "wam_diff2_ros/drive/batch.py": "test_drive_scores_table",
}


def _no_live_markup(text: str) -> None:
    assert re.search(r"<[A-Za-z/!?]", text) is None, re.search(r".{0,40}<[A-Za-z/!?].{0,40}", text)
    assert "\ud800" not in text and "injected heading" not in text.replace("# injected", "")


def _markdown_is_inert(text: str) -> None:
    """No raw HTML, no heading or row that a string started, every table row with its header's columns."""
    _no_live_markup(text)
    table_width = None
    for line in text.split("\n"):
        assert not line.startswith("# injected") and not line.startswith("| x | y"), line
        if line.startswith("|"):
            cells = line.replace("\\|", "").count("|")
            table_width = cells if table_width is None else table_width
            assert cells == table_width, line
        else:
            table_width = None
        assert len(line) < 40 * PAGE_TEXT_CHARS  # megabyte texts are shortened


def _page_data(page: str, marker: str) -> Any:
    start = page.index(marker) + len(marker)
    data = page[start : page.index("</script>", start)]
    assert not set(data) & set("<>&\u2028\u2029")
    return json.loads(data)


def _page_is_inert(page: str, marker: str) -> Any:
    data = _page_data(page, marker)
    start = page.index(marker)
    rest = page[:start] + page[page.index("</script>", start) :]
    assert page.count("<script") == 2 and "<img src" not in rest and "<svg onload" not in rest
    assert "\ud800" not in page and len(page) < 2_000_000
    return data


@pytest.mark.core
def test_replay_report_page(tmp_path: Path) -> None:
    from wam_diff2_ros.replay.report_page import RAW_TEXT_CHARS, write_report_page

    records = []
    for k, text in enumerate(HOSTILE):
        records.append(
            {
                "instant": k, "t_s": NAN if k == 1 else k / 10, "status": "planned", "stamp_ns": k, "valid": False,
                "reason": text, "command": text, "raw_text": text, "velocity": [NAN, INF], "confidence": INF,
                "waypoints": [[NAN, 1.0], [INF, -INF]], "timing": {"total_ms": NAN},
                "candidates": [{"index": 0, "valid": False, "score": NAN, "reason": text, "waypoints": None}],
            }
        )  # fmt: skip
    metrics = {
        "run": {"model": HOSTILE[1], "bag": f"/bags/{HOSTILE[4]}", "device": HOSTILE[3], "params_hash": LONG},
        "horizons_s": [1.0, 2.0],
        "ade_1s": NAN,
        "fde_1s": INF,
        "error_curve": [{"t": 1.0, "mean_l2": NAN, "count": 3}, {"t": INF, "mean_l2": 0.5, "count": 1}],
        "notes": HOSTILE,
        "latency_ms": {"p50": NAN, "p95": INF, "max": -INF},
    }
    path = write_report_page(tmp_path / "report.html", metrics, records, [], None)
    data = _page_is_inert(path.read_text(encoding="utf-8"), 'id="report-data">')
    assert data["error_curve"][0]["mean_l2"] is None and data["error_curve"][1]["t"] is None
    rows = data["rows"]
    assert [r["reason"] for r in rows][:7] == [t.replace("\ud800", "\ud800") for t in HOSTILE[:7]]
    assert rows[-1]["reason"].startswith("L" * PAGE_TEXT_CHARS) and len(rows[-1]["reason"]) < PAGE_TEXT_CHARS + 50
    assert len(rows[-1]["raw_text"]) == RAW_TEXT_CHARS and rows[1]["t"] is None and rows[0]["confidence"] is None
    assert rows[0]["predicted"] == [None, None]
    title = re.search("<title>(.*)</title>", path.read_text(encoding="utf-8")).group(1)
    assert "&lt;img" in title and "\ufffd" in title


@pytest.mark.core
def test_deadline_curve_table(tmp_path: Path) -> None:
    from wam_diff2_ros.replay.sweep import write_curve

    rows = [{"label": text, "deadline_ms": NAN, "plans": 3, "valid_rate": INF} for text in HOSTILE]
    paths = write_curve(rows, tmp_path)
    _markdown_is_inert(paths[1].read_text(encoding="utf-8"))
    assert json.loads(paths[0].read_text(encoding="utf-8"))[3]["label"] == HOSTILE[3]


@pytest.mark.core
def test_plots_take_any_text(tmp_path: Path) -> None:
    from wam_diff2_ros.replay.plots import plot_error_over_horizon

    curve = [{"t": 1.0, "mean_l2": 0.5, "count": 2}, {"t": 2.0, "mean_l2": NAN, "count": 0}]
    names = [*HOSTILE, "$\\frac{$", "a$b$c"]
    by_command = {n: {"error_curve": curve, "count": 1} for n in names}
    metrics = {"error_curve": curve, "num_valid": 2, "by_command": by_command}
    path = plot_error_over_horizon(metrics, tmp_path / "curve.png", title="$\\frac{ \ud800 " + LONG)
    assert path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.core
def test_fleet_markdown_report(tmp_path: Path) -> None:
    from wam_diff2_ros.core.markup import write_page
    from wam_diff2_ros.fleet.report_text import markdown

    metric = {"plans": 1, "valid_rate": NAN, "ade_4s": INF, "latency_ms_p50": NAN}
    bags = [
        {"name": text, "status": "done", "links": {"report.html": f"bags/{text}/report.html"}, "wall_s": NAN, **metric}
        for text in HOSTILE
    ] + [{"name": text, "status": "failed", "reason": text} for text in HOSTILE]
    report = {
        "settings": {"model": "/models/x\n# injected heading\n<script>", "model_sha256": HOSTILE[0]},
        "bags_total": 2 * len(HOSTILE),
        "bags_done": len(HOSTILE),
        "bags_failed": len(HOSTILE),
        "pooled": {
            "planning_instants": 3,
            "blocked": 0,
            "invalid_reasons": {t: 1 for t in HOSTILE},
            **metric,
            "by_command": {t: {"count": 1, **metric} for t in HOSTILE},
            "by_speed": {t: metric for t in HOSTILE},
        },
        "bags": bags,
        "worst_bags": bags[: len(HOSTILE)],
        "least_valid_bags": bags[: len(HOSTILE)],
        "worst_plans": [{"bag": t, "t_s": NAN, "command": t, "speed_mps": INF} for t in HOSTILE],
        "invalid_plans": [{"bag": t, "t_s": 1.0, "command": t, "reason": t} for t in HOSTILE],
        "failures": [{"name": t, "reason": t} for t in HOSTILE],
        "plots": ["plots/x.png"],
    }
    path = write_page(tmp_path / "fleet_report.md", markdown(report))
    text = path.read_text(encoding="utf-8")
    _markdown_is_inert(text)
    model_line = "Model /models/x # injected heading &lt;script&gt; (sha256 &lt;/script&gt;&lt;script),"
    assert text.split("\n")[2].startswith(model_line)


def _episode(text: str) -> tuple[dict[str, Any], Any]:
    from wam_diff2_ros.drive.world import build_world, load_scenarios

    world = build_world(load_scenarios("straight_5")[0])
    state = SimpleNamespace(x=0.0, y=0.0, v=NAN, a=INF)
    plan = SimpleNamespace(index=0, t_s=0.0, effective_s=NAN, valid=False, reason=text, latency_ms=INF, command=text)
    plan.points = [[NAN, 0.0], [1.0, INF]]
    episode = SimpleNamespace(
        world=world,
        trace=SimpleNamespace(t=[0.0, 0.1], states=[state, state]),
        samples=[{"s": 0.0, "d": NAN, "on_road": True}] * 2,
        plans=[plan],
    )
    score = {"pdms": NAN, "nc": INF, "lane_deviation_m": {"mean": NAN, "max": INF}, "why": text}
    score |= {"windows": [], "events": [{"t": 0.0, "text": text}]}
    document = {
        "scenario": {"name": text, "seed": 1},
        "score": score,
        "plans": {
            "made": 1,
            "valid": 0,
            "used": 0,
            "rejected": 1,
            "rejection_reasons": {text: 1},
            "latency_ms": {"mean": NAN, "measured": True},
        },
        "stop_reason": text,
        "simulated_s": NAN,
        "wall_s": INF,
        "model": text,
    }
    return document, episode


def test_drive_report_page(tmp_path: Path) -> None:
    from wam_diff2_ros.drive.report import write_report

    for k, text in enumerate(HOSTILE):
        document, episode = _episode(text)
        path = write_report(tmp_path / f"report{k}.html", document, episode)
        data = _page_is_inert(path.read_text(encoding="utf-8"), 'id="data" type="application/json">')
        assert data["plans"][0]["reason"] == text[: PAGE_TEXT_CHARS + 50] or text == LONG
        assert data["plans"][0]["latency_ms"] is None and data["plans"][0]["pts"][0] == [None, 0.0]


def test_drive_scores_table(tmp_path: Path) -> None:
    from wam_diff2_ros.drive.batch import TERMS, write_table

    rows = []
    for k, text in enumerate(HOSTILE):
        row: dict[str, Any] = {"scenario": text, "seed": k, **{t: NAN for t in TERMS}, "lane_dev_mean_m": INF}
        rows.append(row | {"plans_valid": 0, "plans_made": 1, "simulated_s": NAN, "stop_reason": text})
    write_table(tmp_path, rows)
    _markdown_is_inert((tmp_path / "scores.md").read_text(encoding="utf-8"))
    assert json.loads((tmp_path / "scores.json").read_text(encoding="utf-8"))["episodes"][7]["scenario"] == LONG


@pytest.mark.core
def test_every_page_and_markdown_writer_is_walked_here() -> None:
    """A module that writes a ``.md`` or ``.html`` file writes it with ``write_page`` and is listed in WRITERS."""
    package = REPO / "wam_diff2_ros"
    writers = set()
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        relative = str(path.relative_to(REPO))
        for line in text.split("\n"):
            if re.search(r"write_text\(|\.open\(\s*[\"']w|open\([^)]*[\"']w", line):
                assert not re.search(r"\.(md|html)\b", line), f"{relative}: {line.strip()} (use write_page)"
        if "write_page(" in text and relative != "wam_diff2_ros/core/markup.py":
            writers.add(relative)
    assert writers == set(WRITERS)
