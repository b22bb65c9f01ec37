"""The fleet report as Markdown (``fleet_report.md``): pooled metrics, by command and speed, every bag, the worst
bags and plans, the failures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from wam_diff2_ros.core.markup import markdown_cell
from wam_diff2_ros.core.tables import markdown_table, number, percent

LABELS = ("1s", "2s", "3s", "4s")


def _errors(m: Mapping[str, Any]) -> list[str]:
    return [f"{number(m.get(f'ade_{h}'))} / {number(m.get(f'fde_{h}'))}" for h in LABELS]


METRIC_HEADER = ["plans", "valid", *(f"ADE/FDE {h} [m]" for h in LABELS), "latency p50 / p95"]


def _metric_cells(m: Mapping[str, Any]) -> list[str]:
    latency = f"{number(m.get('latency_ms_p50'), 0)} / {number(m.get('latency_ms_p95'), 0)} ms"
    return [str(m.get("plans", 0)), percent(m.get("valid_rate")), *_errors(m), latency]


def _bag_link(bag: Mapping[str, Any]) -> str:
    links = bag.get("links") or {}
    target = links.get("report.html") or links.get("summary.txt")
    if not target:
        return str(bag["name"])
    text = str(bag["name"]).replace("[", "\\[").replace("]", "\\]")
    return f"[{text}]({quote(str(target), errors='replace')})"  # percent-encoded: no ")" or space can end it


def markdown(report: Mapping[str, Any]) -> str:
    """The report's Markdown text."""
    pooled = report["pooled"]
    settings = report.get("settings", {})
    lines = [
        "# Fleet evaluation",
        "",
        f"Model {markdown_cell(settings.get('model', '?'))} "
        f"(sha256 {markdown_cell(str(settings.get('model_sha256', '?'))[:16])}), "
        f"{report['bags_total']} bag(s): {report['bags_done']} replayed, {report['bags_failed']} failed. "
        f"{pooled['planning_instants']} planning instant(s), {pooled['blocked']} blocked. "
        "ADE/FDE against each bag's odometry, pooled over instants.",
        "",
        "## Pooled",
        "",
        *markdown_table(METRIC_HEADER, [_metric_cells(pooled)]),
    ]
    if pooled.get("by_command"):
        lines += ["### By command", ""]
        lines += markdown_table(
            ["command", "plans", *(f"ADE/FDE {h} [m]" for h in LABELS)],
            [[name, str(g["count"]), *_errors(g)] for name, g in pooled["by_command"].items()],
        )
    if pooled.get("by_speed"):
        lines += ["### By ego speed at plan time", ""]
        lines += markdown_table(
            ["speed", *METRIC_HEADER], [[band, *_metric_cells(m)] for band, m in pooled["by_speed"].items()]
        )
    picked = pooled.get("candidates") or {}
    if picked.get("candidates", 1) > 1:
        lines += [
            f"Candidates: {picked['candidates']} per plan; score (confidence) vs ADE 4 s Spearman "
            f"{number(picked.get('score_spearman_vs_ade_4s'))} over {picked.get('scored_plans', 0)} plans; greedy "
            f"rejected and a sampled candidate published {picked.get('greedy_rejected_sampled_published', 0)}x.",
            "",
        ]
    if pooled.get("invalid_reasons"):
        lines += [
            "Invalid plans by reason: "
            + "; ".join(f"{markdown_cell(r)} ({n}x)" for r, n in pooled["invalid_reasons"].items())
        ]
        lines += [""]
    lines += [*(f"![{markdown_cell(p.rsplit('/', 1)[-1])}]({quote(p)})" for p in report.get("plots", [])), ""]
    lines += ["## Bags", ""]
    rows = []
    for bag in report["bags"]:
        if bag["status"] == "done":
            rows.append([_bag_link(bag), bag["status"], *_metric_cells(bag), f"{bag['wall_s']:.1f} s"])
        else:
            rows.append([bag["name"], f"{bag['status']}: {bag.get('reason')}", *[""] * len(METRIC_HEADER), ""])
    lines += markdown_table(["bag", "status", *METRIC_HEADER, "wall"], rows)
    if report.get("worst_bags"):
        lines += ["## Worst bags (ADE at the longest horizon they have)", ""]
        lines += markdown_table(
            ["bag", *METRIC_HEADER], [[_bag_link(b), *_metric_cells(b)] for b in report["worst_bags"]]
        )
    if report.get("least_valid_bags"):
        lines += ["## Bags with invalid plans", ""]
        lines += markdown_table(
            ["bag", *METRIC_HEADER], [[_bag_link(b), *_metric_cells(b)] for b in report["least_valid_bags"]]
        )
    if report.get("worst_plans"):
        lines += ["## Worst plans (FDE at the longest horizon they have)", ""]
        lines += markdown_table(
            ["bag", "t [s]", "command", "speed [m/s]", *(f"ADE/FDE {h} [m]" for h in LABELS)],
            [
                [p["bag"], number(p.get("t_s")), str(p.get("command")), number(p.get("speed_mps"), 1), *_errors(p)]
                for p in report["worst_plans"]
            ],
        )
    if report.get("invalid_plans"):
        lines += ["## Invalid plans", ""]
        lines += markdown_table(
            ["bag", "t [s]", "command", "reason"],
            [
                [p["bag"], number(p.get("t_s")), str(p.get("command")), str(p.get("reason"))]
                for p in report["invalid_plans"]
            ],
        )
    if report.get("failures"):
        lines += ["## Failed bags", ""]
        lines += markdown_table(["bag", "reason"], [[f["name"], str(f["reason"])] for f in report["failures"]])
    return "\n".join(lines)
