"""``report.html`` in a real browser: Debian's Chromium driven by Playwright (the system browser, headless). The
sample drive's replay page (the node's runtime, the scripted engine): no console errors, no network request,
one row per ``predictions.jsonl`` line, sorting by ADE, filtering, a click draws that frame; a screenshot is kept
under the test's tmp path. A synthetic 5,000-plan page stays paginated and usable (its size and load time are
printed). Skipped, with the reason, where Chromium or Playwright is missing (``pip install '.[report-test]'``,
``apt-get install chromium``).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wam_diff2_ros.replay.report_page import write_report_page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
HORIZONS = [0.5 * (k + 1) for k in range(8)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (apt-get install chromium); the report page is not browser-tested")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright missing (pip install '.[report-test]')")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield browser
        browser.close()


class Page:
    """A page of the report, with its console errors and any network request it tried."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.route("http*://**/*", lambda route: (self.requests.append(route.request.url), route.abort()))
        started = time.perf_counter()
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_selector("body[data-ready=true]")
        self.load_s = time.perf_counter() - started

    def column(self, cls: str) -> list[str]:
        return self.page.locator(f"#plan-table tbody td.{cls}").all_inner_texts()

    def rows(self) -> int:
        return self.page.locator("#plan-table tbody tr").count()


def _is_sorted(values: list[str], descending: bool = False) -> bool:
    filled = [float(v) for v in values if v]
    empties_last = all(not v for v in values[len(filled) :])
    return empties_last and filled == sorted(filled, reverse=descending)


# --- the sample drive ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory) -> Path:
    pytest.importorskip("rclpy", reason="the replay needs rclpy (install the PyPI ROS 2 wheels)")
    from scripted_engine import ScriptedEngine

    from wam_diff2_ros.replay import EXIT_OK, ReplayOptions, replay
    from wam_diff2_ros.sim import make_sample_bag

    root = tmp_path_factory.mktemp("report")
    bag = make_sample_bag(root / "drive", seconds=6.0, width=320, height=180).path
    options = ReplayOptions(bag=bag, out=root / "run", model=str(root), progress=False, plots=False)
    result = replay(options, engine_factory=lambda config: ScriptedEngine(config), log=lambda text: None)
    assert result.exit_code == EXIT_OK and result.report_path == root / "run" / "report.html"
    return result.report_path


def test_sample_drive_report_in_chromium(browser, sample_report, tmp_path) -> None:
    records = [json.loads(line) for line in (sample_report.parent / "predictions.jsonl").read_text().splitlines()]
    metrics = json.loads((sample_report.parent / "metrics.json").read_text())
    page = Page(browser, sample_report)
    assert page.rows() == len(records) >= 5
    assert page.page.inner_text("#count") == f"({len(records)} of {len(records)})"
    with_ground_truth = sum(1 for v in page.column("ade") if v)
    assert with_ground_truth == metrics["count_1s"]  # every plan whose 1 s future is in the bag has an ADE

    page.page.click("th[data-key=ade]")
    ascending = page.column("ade")
    assert _is_sorted(ascending) and ascending != page.column("ade")[::-1]
    page.page.click("th[data-key=ade]")
    assert _is_sorted(page.column("ade"), descending=True)
    assert page.page.get_attribute("th[data-key=ade]", "aria-sort") == "descending"

    worst = page.page.locator("#plan-table tbody tr").first  # the largest ADE
    instant = int(worst.get_attribute("data-instant"))
    worst.click()
    assert page.page.get_attribute("#frame", "data-instant") == str(instant)
    record = next(r for r in records if r["instant"] == instant)
    assert f"at t = {record['t_s']:.2f} s" in page.page.inner_text("#frame-title")
    colours = page.page.evaluate(
        """() => { const c = document.getElementById('bev'), d = c.getContext('2d').getImageData(0, 0, c.width,
        c.height).data; let green = 0, blue = 0; for (let i = 0; i < d.length; i += 4) {
        if (d[i] === 0x2e && d[i + 1] === 0x7d && d[i + 2] === 0x32) green++;
        if (d[i] === 0x15 && d[i + 1] === 0x65 && d[i + 2] === 0xc0) blue++; } return [green, blue]; }"""
    )
    assert colours[0] > 50 and colours[1] > 50  # the predicted (green) and the actual (blue) path are drawn

    page.page.select_option("#status-filter", "valid")
    assert page.rows() == sum(1 for r in records if r["valid"])
    page.page.fill("#filter", "no such command")
    assert page.rows() == 0
    page.page.fill("#filter", "")
    page.page.select_option("#status-filter", "")
    page.page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    print(f"\nscreenshot: {tmp_path / 'report.png'}")
    assert page.errors == [] and page.requests == []


# --- 5,000 plans -----------------------------------------------------------------------------------------------


class StraightTrack:
    """The ego drives straight at 8 m/s: its future in the ego frame."""

    def future_in_ego_frame(self, t_ns: int, horizons_s: Any = ()) -> np.ndarray:
        return np.array([[8.0 * h, 0.0] for h in horizons_s])


def synthetic(count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """``count`` planning instants (a tenth invalid, a few blocked) with their per-plan errors and metrics."""
    rng = np.random.default_rng(0)
    records, instants = [], []
    for k in range(count):
        stamp = 1_700_000_000 * 10**9 + k * 10**8
        if k % 97 == 3:
            reason = "odometry: no message for 0.6 s"
            records.append({"instant": k, "t_s": k / 10, "status": "blocked", "stamp_ns": None, "valid": False,
                            "reason": reason, "waypoints": None, "timing": {"wall_ms": 1.0}})  # fmt: skip
            continue
        valid = k % 10 != 7
        waypoints = [[8.0 * h + rng.normal(0, 0.3), rng.normal(0, 0.2 * h)] for h in HORIZONS] if valid else None
        records.append(
            {
                "instant": k, "t_s": k / 10, "status": "planned", "stamp_ns": stamp, "valid": valid,
                "reason": "" if valid else "kinematics: lateral acceleration 9.1 m/s^2 > 6", "command": "straight",
                "velocity": [8.0, 0.0], "waypoints": waypoints, "timing": {"total_ms": 400 + k % 50},
                "raw_text": "4.0, 0.1, 8.0, 0.2", "confidence": 0.5 + 0.5 * math.sin(k),
                "rejected_waypoints": None if valid else [[4.0 * h, 0.9 * h * h] for h in HORIZONS],
            }
        )  # fmt: skip
        if valid:
            errors = [math.hypot(w[0] - 8.0 * h, w[1]) for w, h in zip(waypoints, HORIZONS, strict=True)]
            instants.append({"stamp_ns": stamp, "ade_4s": float(np.mean(errors)), "fde_4s": errors[-1]})
        else:
            instants.append({"stamp_ns": stamp, "valid": False})
    metrics = {
        "run": {"model": "synthetic", "bag": "synthetic"},
        "horizons_s": HORIZONS,
        "ade_4s": float(np.mean([i["ade_4s"] for i in instants if "ade_4s" in i])),
        "error_curve": [{"t": h, "mean_l2": 0.1 * h, "count": count} for h in HORIZONS],
        "notes": [],
    }
    return records, instants, metrics


@pytest.mark.core
def test_report_page_is_self_contained(tmp_path) -> None:
    records, instants, metrics = synthetic(300)
    path = write_report_page(tmp_path / "report.html", metrics, records, instants, StraightTrack())
    page = path.read_text()
    for reference in ("src=", "href=", "http://", "https://", "@import", "url("):
        assert reference not in page, reference  # nothing to fetch
    start = page.index('id="report-data">') + len('id="report-data">')
    data = json.loads(page[start : page.index("</script>", start)])
    assert [r["instant"] for r in data["rows"]] == [r["instant"] for r in records]
    row = data["rows"][0]
    assert row["predicted"] == [[round(x, 2), round(y, 2)] for x, y in records[0]["waypoints"]]
    assert row["actual"] == [[8.0 * h, 0.0] for h in HORIZONS] and row["ade"] == round(instants[0]["ade_4s"], 3)
    assert next(r for r in data["rows"] if r["status"] == "blocked")["actual"] is None
    rejected = next(r for r in data["rows"] if r["status"] == "invalid")
    source = next(r for r in records if r["instant"] == rejected["instant"])
    assert rejected["predicted"] is None
    assert rejected["rejected"] == [[round(x, 2), round(y, 2)] for x, y in source["rejected_waypoints"]]
    assert rejected["confidence"] == round(source["confidence"], 3)


@pytest.mark.slow
def test_five_thousand_plans_stay_usable(browser, tmp_path) -> None:
    records, instants, metrics = synthetic(5000)
    path = write_report_page(tmp_path / "report.html", metrics, records, instants, StraightTrack())
    page = Page(browser, path)
    print(f"\nreport.html with 5000 plans: {path.stat().st_size / 1e6:.2f} MB, loaded in {page.load_s:.2f} s")
    assert page.page.inner_text("#count") == "(5000 of 5000)"
    assert page.rows() == 100 and page.page.inner_text("#page") == "page 1 of 50"
    page.page.click("th[data-key=ade]")
    assert _is_sorted(page.column("ade"))
    page.page.select_option("#page-size", "500")
    for _ in range(9):
        page.page.click("#next")
    assert page.page.inner_text("#page") == "page 10 of 10"
    assert page.rows() == 500 and all(not v for v in page.column("ade")[-50:])  # invalid / blocked sort last
    page.page.locator("#plan-table tbody tr").first.click()
    assert page.page.get_attribute("#frame", "data-instant") == page.page.locator(
        "#plan-table tbody tr"
    ).first.get_attribute("data-instant")
    assert page.errors == [] and page.requests == []


# --- text that must not break the page -------------------------------------------------------------------------

HOSTILE = [
    "<!--<script>",
    "</script><script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    "line\u2028separator\u2029paragraph",
    '\'"><svg onload="window.__pwned = 3"></svg>&amp;<![CDATA[',
    "__DATA__ __TITLE__ <\\/script>",
]


def hostile_report(path: Path) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    """A page whose every text field (answer, reason, command, bag, model, notes, engine) holds a hostile string."""
    records, instants, metrics = synthetic(12)
    for k, record in enumerate(records):
        text = HOSTILE[k % len(HOSTILE)]
        record.update(command=text, reason=text, raw_text=text)
    metrics["run"] = {"model": HOSTILE[1], "bag": f"/bags/{HOSTILE[0]}", "device": HOSTILE[2], "dtype": HOSTILE[3],
                      "decoding_engine": HOSTILE[4], "params_hash": HOSTILE[5]}  # fmt: skip
    metrics["notes"] = list(HOSTILE)
    return write_report_page(path, metrics, records, instants, StraightTrack()), records, metrics


@pytest.mark.core
def test_embedded_data_holds_no_markup_characters(tmp_path) -> None:
    from wam_diff2_ros.core.markup import embed_json

    for text in HOSTILE:
        embedded = embed_json({"text": text})
        assert json.loads(embedded) == {"text": text}
        assert not set(embedded) & set("<>&\u2028\u2029"), embedded
    page = hostile_report(tmp_path / "report.html")[0].read_text()
    start = page.index('id="report-data">') + len('id="report-data">')
    data = page[start : page.index("</script>", start)]
    assert not set(data) & set("<>&\u2028\u2029") and json.loads(data)["summary"]["notes"] == HOSTILE


def test_hostile_text_leaves_the_page_whole_and_inert(browser, tmp_path) -> None:
    from wam_diff2_ros.replay.report_page import summary_items

    path, records, metrics = hostile_report(tmp_path / "report.html")
    page = Page(browser, path)
    assert page.page.evaluate("() => window.__pwned") is None  # nothing ran
    assert page.page.evaluate("() => document.querySelectorAll('img, iframe, svg svg, svg[onload]').length") == 0
    assert page.page.evaluate("() => document.scripts.length") == 2  # the data element and the page's own script
    assert page.rows() == len(records) and page.page.inner_text("#count") == f"({len(records)} of {len(records)})"
    text_of = "(sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent)"
    summary = page.page.evaluate(text_of, "#summary-table td")
    assert summary == [str(v) for item in summary_items(metrics) for v in item]
    assert page.page.evaluate(text_of, "#notes div") == HOSTILE
    assert page.page.evaluate(text_of, "#plan-table tbody td.reason") == [r["reason"] for r in records]
    commands = page.page.evaluate(text_of, "#plan-table tbody td:nth-child(3)")
    assert commands == [r.get("command", "") for r in records]
    assert page.page.evaluate("() => document.getElementById('subtitle').textContent") == f"bag /bags/{HOSTILE[0]}"
    assert page.page.title() == f"wam-diff2-replay: {HOSTILE[1]} on {HOSTILE[0]}"
    row = page.page.locator("#plan-table tbody tr").nth(2)
    row.click()
    info = page.page.evaluate("() => document.getElementById('frame-info').textContent")
    assert f"model answer: {records[2]['raw_text']}" in info and records[2]["reason"] in info
    page.page.fill("#filter", "onerror")
    assert page.rows() == sum("onerror" in r.get("command", "") or "onerror" in r["reason"] for r in records) > 0
    assert page.page.evaluate("() => window.__pwned") is None and page.errors == [] and page.requests == []


def test_candidates_are_drawn_and_listed_in_chromium(browser, tmp_path) -> None:
    """A candidate batch's plan: the frame draws the unpublished candidates faintly and lists every one with its
    verdict; the summary names the candidate figures."""
    records, instants, metrics = synthetic(3)
    first = next(r for r in records if r["valid"])
    rejected = [[8.0 * h, 0.0] for h in HORIZONS[:-1]] + [[20.0, 0.0]]
    first["candidates"] = [
        {"index": 0, "temperature": 0.0, "valid": False, "reason": "backward rule: waypoint 8", "score": 0.0,
         "waypoints": rejected, "waypoint_confidence": [], "raw_text": ""},
        {"index": 1, "temperature": 1.0, "valid": True, "reason": "", "score": 0.8, "waypoints": first["waypoints"],
         "waypoint_confidence": [], "raw_text": ""},
        {"index": 2, "temperature": 1.0, "valid": True, "reason": "", "score": 0.5, "waypoints": first["waypoints"],
         "waypoint_confidence": [], "raw_text": ""},
    ]  # fmt: skip
    first["chosen_candidate"] = 1
    metrics["candidates"] = {"candidates": 3, "mean_valid_candidates": 2.0, "score_spearman_vs_ade_4s": -0.4,
                             "scored_plans": 2}  # fmt: skip
    page = Page(browser, write_report_page(tmp_path / "report.html", metrics, records, instants, StraightTrack()))
    page.page.locator(f"#plan-table tbody tr[data-instant='{first['instant']}']").click()
    assert page.page.get_attribute("#frame", "data-candidates") == "2"  # all but the published one
    info = page.page.inner_text("#frame-info")
    assert "candidate 0: rejected: backward rule" in info and "candidate 1 (published): valid, score 0.80" in info
    assert "3 per plan" in page.page.inner_text("#summary-table")
    assert page.errors == [] and page.requests == []
