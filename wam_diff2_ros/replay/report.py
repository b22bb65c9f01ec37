"""The end of a replay: metrics against the bag's odometry, plots, ``metrics.json`` and ``summary.txt``."""

from __future__ import annotations

import math
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wam_diff2_ros.core.markup import write_page
from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.core.planning import describe_decoding
from wam_diff2_ros.core.tables import number
from wam_diff2_ros.core.units import NS_PER_S
from wam_diff2_ros.replay.candidates import candidate_pairs, candidate_summary
from wam_diff2_ros.replay.confidence_analysis import confidence_analysis, decoding_summary
from wam_diff2_ros.replay.errors import EXIT_BAG_DAMAGED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_PLANS, EXIT_OK
from wam_diff2_ros.replay.outputs import Outputs
from wam_diff2_ros.replay.report_page import write_report_page
from wam_diff2_ros.replay.settings import RunPlan, params_hash
from wam_diff2_ros.replay.state import NoTrack, ReplayResult, Run
from wam_diff2_ros.replay.topics import BAG_DIR_NAME, TopicMap

NA = "n/a"  # a figure the summary cannot give


def _pair(values: Mapping[str, Any], first: str, second: str) -> str:
    """``first/second`` of ``values``, 2 decimals each."""
    return f"{number(values.get(first), missing=NA)}/{number(values.get(second), missing=NA)}"


def plan_records_for_metrics(
    records: Sequence[Mapping[str, Any]], num_waypoints: int, waypoint_dt_s: float
) -> list[dict[str, Any]]:
    """The planned instants as :class:`~wam_diff2_ros.replay.evaluation.PlanRecord` mappings; an invalid plan
    whose answer still reads as waypoints (the kinematic gate, or the age gate, rejected it) keeps them as
    ``rejected``, for the plots."""
    rows = []
    for r in records:
        if r["status"] != "planned":
            continue
        vx, vy = r["velocity"]
        rejected = None
        if not r["valid"] and r.get("raw_text"):
            parsed = parse_waypoints(
                r["raw_text"], num_waypoints=num_waypoints, dt=waypoint_dt_s, check_kinematics=False
            )
            if parsed.valid:
                rejected = [[w.x, w.y] for w in parsed.waypoints]
        rows.append(
            {
                "stamp_ns": r["stamp_ns"],
                "valid": r["valid"],
                "waypoints": r["waypoints"],
                "latency_s": r["timing"]["total_ms"] / 1000.0,
                "command": r["command"],
                "speed": math.hypot(vx, vy),
                "reason": r.get("reason") or None,
                "rejected": rejected,
            }
        )
    return rows


def finish(
    run: Run,
    plan: RunPlan,
    reader: Any,
    config: Any,
    topic_map: TopicMap,
    engine: Any,
    wall_start: float,
    load_s: float,
    outputs: Outputs,
    exit_code: int,
) -> ReplayResult:
    """Write what a replay leaves besides its bag and predictions (``metrics.json``, ``plots/``, ``report.html``,
    ``summary.txt``) and return its :class:`ReplayResult`."""
    from wam_diff2_ros.replay import evaluation

    out = plan.out
    track, ground_truth, notes = _ground_truth(run, topic_map)
    metrics, instants, plan_rows = _plan_metrics(run, config, track, notes)
    plots = _write_plots(out, plan.plots, plan_rows, metrics, track, config, engine, Path(reader.path).name, notes)
    metrics.update(
        ground_truth=ground_truth,
        complete=exit_code in (EXIT_OK, EXIT_NO_PLANS),
        bag_error=run.bag_error,
        exit_code=exit_code,
        notes=notes,
        run=_run_section(run, plan, reader, config, topic_map, engine, outputs, wall_start, load_s),
    )
    metrics_path = evaluation.write_metrics_json(metrics, out / "metrics.json")
    report_path: Path | None = out / "report.html"
    try:
        write_report_page(out / "report.html", metrics, run.records, instants, track)
    except Exception as exc:  # the page must never cost the metrics
        report_path = None
        notes.append(f"report.html skipped: {type(exc).__name__}: {exc}")
    summary = _summary_text(topic_map, metrics, plots, out)
    summary_path = out / "summary.txt"
    write_page(summary_path, summary)
    return ReplayResult(
        exit_code=exit_code,
        out_dir=out,
        bag_path=out / BAG_DIR_NAME,
        predictions_path=out / "predictions.jsonl",
        metrics_path=metrics_path,
        report_path=report_path,
        summary_path=summary_path,
        plots=plots,
        metrics=metrics,
        summary=summary,
        error=_error_line(run, exit_code, notes),
    )


def _ground_truth(run: Run, topic_map: TopicMap) -> tuple[Any, dict[str, Any], list[str]]:
    """The ego track from the bag's odometry (None without one), ``metrics.json``'s ``ground_truth`` and the
    notes so far."""
    from wam_diff2_ros.replay import evaluation

    notes: list[str] = []
    track: Any = None
    ground_truth: dict[str, Any] = {"source": topic_map.odometry, "samples": len(run.odometry)}
    if topic_map.odometry is None:
        ground_truth.update(available=False, reason="the bag has no odometry topic (or --odometry-topic none)")
    else:
        try:
            track = evaluation.EgoTrack.from_odometry(run.odometry)
            ground_truth.update(available=True, start_ns=track.start_ns, end_ns=track.end_ns)
        except ValueError as exc:
            ground_truth.update(available=False, reason=f"odometry on {topic_map.odometry} is unusable: {exc}")
    if not ground_truth["available"]:
        notes.append(f"no ground truth: {ground_truth['reason']}")
    return track, ground_truth, notes


def _plan_metrics(
    run: Run, config: Any, track: Any, notes: list[str]
) -> tuple[dict[str, Any], list[Any], list[dict[str, Any]]]:
    """The plans' metrics (errors, decoding, confidence, invalid and blocked instants), the per-plan errors for
    the report page and the rows they were computed from; what went wrong joins ``notes``."""
    from wam_diff2_ros.replay import evaluation

    plan_rows = plan_records_for_metrics(run.records, config.planning.num_waypoints, config.planning.waypoint_dt_s)
    metrics = evaluation.compute_metrics(plan_rows, track if track is not None else NoTrack(), include_instants=True)
    instants = metrics.pop("instants")  # per plan: the report page's ADE/FDE column
    planned = [r for r in run.records if r["status"] == "planned"]
    metrics["decoding"] = decoding_summary(planned)
    if track is not None and planned:
        metrics["confidence"] = confidence_analysis(planned, track)
        metrics["candidates"] = candidate_summary(candidate_pairs(planned, instants))
    invalid_answers = [r["reason"] for r in planned if not r["valid"]]
    metrics["invalid_answer_reasons"] = dict(Counter(_reason_kind(reason) for reason in invalid_answers))
    metrics["invalid_by_rule"] = evaluation.invalid_by_rule(invalid_answers)
    blocked = [r for r in run.records if r["status"] == "blocked"]
    blocked_reasons: Counter[str] = Counter(p for r in blocked for p in r["problems"])
    blocked_inputs: Counter[str] = Counter(p.split(":", 1)[0] for r in blocked for p in r["problems"])
    if run.num_planned == 0:
        if blocked:
            top = "; ".join(f"{reason} ({count}x)" for reason, count in blocked_reasons.most_common(3))
            notes.insert(0, f"no instant could be planned: {top}")
        elif not run.records:
            notes.insert(0, "no planning instant: no front image inside the replayed window")
        else:
            notes.insert(0, "no instant could be planned: the model failed every time")
    if run.bag_error:
        notes.append(f"bag damaged: {run.bag_error}")
    if run.fatal:
        notes.append(f"stopped: {run.fatal}")
    if run.interrupted:
        notes.append("interrupted: the outputs hold what was replayed until then")
    metrics.update(
        planning_instants=len(run.records),
        num_blocked=len(blocked),
        blocked_reasons=dict(blocked_reasons.most_common()),
        blocked_inputs=dict(blocked_inputs.most_common()),
        num_engine_errors=run.engine_errors,
        dropped_messages=dict(run.dropped.most_common()),
    )
    return metrics, instants, plan_rows


def _write_plots(
    out: Path,
    wanted: bool,
    plan_rows: Sequence[dict[str, Any]],
    metrics: Mapping[str, Any],
    track: Any,
    config: Any,
    engine: Any,
    bag_name: str,
    notes: list[str],
) -> list[Path]:
    """``plots/bev.png`` and ``plots/error_over_horizon.png`` (a plot that fails is a note, never an error)."""
    from wam_diff2_ros.replay import plots as plotting

    plots: list[Path] = []
    if wanted and track is None:
        notes.append("plots skipped: no ground truth")
    if not wanted or track is None:
        return plots
    model_name = getattr(engine, "name", "?")
    horizon_ns = round(config.planning.num_waypoints * config.planning.waypoint_dt_s * NS_PER_S)
    # panels at instants whose whole future is in the bag (when there are any)
    full = [row for row in plan_rows if row["stamp_ns"] + horizon_ns <= track.end_ns]
    bev_rows = full or plan_rows
    drawings = (
        (
            "bev",
            lambda: plotting.plot_bev(
                bev_rows,
                track,
                out / "plots" / "bev.png",
                title=f"{model_name} on {bag_name}: predicted vs actual future (ego frame)",
            ),
        ),
        (
            "error over horizon",
            lambda: plotting.plot_error_over_horizon(
                metrics, out / "plots" / "error_over_horizon.png", title=f"{model_name}: error over the horizon"
            ),
        ),
    )
    for name, draw in drawings:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # e.g. an empty legend without valid plans
                plots.append(draw())
        except Exception as exc:  # a plot must never cost the metrics
            notes.append(f"{name} plot skipped: {exc}")
    return plots


def _run_section(
    run: Run,
    plan: RunPlan,
    reader: Any,
    config: Any,
    topic_map: TopicMap,
    engine: Any,
    outputs: Outputs,
    wall_start: float,
    load_s: float,
) -> dict[str, Any]:
    """``metrics.json``'s ``run``: what was replayed, with what, and what it read and wrote."""
    return {
        "tool": "wam-diff2-replay",
        "bag": str(Path(reader.path).resolve()),
        "topics": topic_map.as_dict(),
        "model": str(getattr(engine, "name", "?")),
        "model_path": config.model_path,
        "device": str(getattr(engine, "device", config.device)),
        "dtype": str(getattr(engine, "dtype", config.dtype)).replace("torch.", ""),
        "decoding_engine": describe_decoding(engine, config.decode),
        "params_file": plan.params_file,
        "overrides": dict(plan.overrides),
        "params_hash": params_hash(config.values),
        "pixel_limits": [config.min_pixels, config.max_pixels],
        "planning_rate_hz": config.rate_hz,
        "start_s": plan.start_s,
        "duration_s": plan.duration_s,
        "max_plans": plan.max_plans,
        "bag_start_ns": run.bag_start_ns,
        "last_message_ns": run.last_stamp_ns,
        "messages_read": run.messages_read,
        "bag_skipped_chunks": [vars(damage) for damage in getattr(reader, "skipped_chunks", ())],
        "messages_fed": dict(sorted(run.messages_fed.items())),
        "detections": run.detections if plan.detect else None,
        "output_messages": outputs.output_counts(),
        "instants": len(run.records),
        "model_load_s": load_s,
        "wall_time_s": time.perf_counter() - wall_start,
    }


def _error_line(run: Run, exit_code: int, notes: Sequence[str]) -> str | None:
    """What the command prints as its error for ``exit_code`` (None when it ended well)."""
    if exit_code == EXIT_BAG_DAMAGED:
        return f"{run.bag_error}; replayed until t={_rel(run.last_stamp_ns, run.bag_start_ns)}"
    if exit_code == EXIT_FAILED:
        return run.fatal
    if exit_code == EXIT_NO_PLANS:
        return notes[0]
    if exit_code == EXIT_INTERRUPTED:
        return f"interrupted at t={_rel(run.last_stamp_ns, run.bag_start_ns)}"
    return None


def _reason_kind(reason: str) -> str:
    """A parse failure reason without its particulars (quoted text, numbers), for counting."""
    import re

    text = re.sub(r"'[^']*'", "'…'", reason)
    return re.sub(r"[-+±]?\d+(\.\d+)?", "N", text)


def _rel(stamp_ns: int | None, start_ns: int | None) -> str:
    if stamp_ns is None or start_ns is None:
        return "?"
    return f"{(stamp_ns - start_ns) / NS_PER_S:.2f} s (bag time {stamp_ns} ns)"


def _summary_text(topic_map: TopicMap, metrics: Mapping[str, Any], plots: Sequence[Path], out: Path) -> str:
    info = metrics["run"]
    topics = [f"image_{i} {t} ({k})" for i, (t, k) in enumerate(topic_map.images)]
    topics += [
        f"{name} {topic}"
        for name, topic in (
            ("odometry", topic_map.odometry),
            ("command", topic_map.command),
            ("driving command", topic_map.driving_command),
            ("acceleration", topic_map.acceleration),
        )
        if topic
    ]
    rate = info["planning_rate_hz"]
    invalid = metrics["invalid_rate"]
    lines = [
        "wam-diff2-replay summary",
        f"bag:        {info['bag']}",
        f"model:      {info['model']} ({info['device']}, {info['dtype']}), params hash {info['params_hash']}",
        f"topics:     {', '.join(topics)}",
        f"planning:   {'each new front image' if rate == 0 else f'{rate:g} Hz'}; {metrics['planning_instants']} "
        f"instant(s): {metrics['num_instants']} planned ({metrics['num_valid']} valid, {metrics['num_invalid']} "
        f"invalid{f' = {100 * invalid:.1f} %' if invalid is not None else ''}), {metrics['num_blocked']} blocked, "
        f"{metrics['num_engine_errors']} engine error(s)",
        "ADE/FDE:    "
        + "  ".join(
            f"{h} {_pair(metrics, f'ade_{h}', f'fde_{h}')} m (n={metrics.get(f'count_{h}')})"
            for h in ("1s", "2s", "3s", "4s")
        ),
    ]
    by_command = metrics.get("by_command") or {}
    if len(by_command) > 1:
        lines.append(
            "by command: "
            + ", ".join(
                f"{name} ADE/FDE@4s {_pair(group, 'ade_4s', 'fde_4s')} m (n={group['count']})"
                for name, group in by_command.items()
            )
        )
    picked = metrics.get("candidates") or {}
    if picked.get("candidates", 1) > 1:
        mean_valid = number(picked.get("mean_valid_candidates"), missing=NA)
        lines.append(
            f"candidates: {picked['candidates']} per plan, {mean_valid} valid on "
            f"average; score vs ADE 4 s Spearman {number(picked.get('score_spearman_vs_ade_4s'), missing=NA)} "
            f"(n={picked.get('scored_plans')}); chosen rows {picked.get('chosen_rows')}"
        )
    latency = metrics["latency_ms"]
    lines.append(
        f"latency:    model p50 {number(latency['p50'], 0, ' ms', NA)}, p95 {number(latency['p95'], 0, ' ms', NA)}, "
        f"max {number(latency['max'], 0, ' ms', NA)} (n={latency['count']})"
    )
    if metrics["invalid_by_rule"]:
        lines.append("invalid:    by rule, with the worst case of each:")
        lines += [
            f"  {rule} ({group['count']}x): {group['worst'].removeprefix(f'{rule} rule: ')}"
            for rule, group in metrics["invalid_by_rule"].items()
        ]
    if metrics["blocked_reasons"]:
        top = list(metrics["blocked_reasons"].items())[:3]
        lines.append("blocked:    " + "; ".join(f"{reason} ({count}x)" for reason, count in top))
    lines.append(f"time:       {info['wall_time_s']:.1f} s wall (model load {info['model_load_s']:.1f} s)")
    counts = ", ".join(f"{name} {count}" for name, count in info["output_messages"].items())
    lines += [
        f"output bag: {out / BAG_DIR_NAME}  ({counts}); play it: ros2 bag play {out / BAG_DIR_NAME}",
        f"results:    {out / 'predictions.jsonl'}, {out / 'metrics.json'}, {out / 'report.html'} (open in a browser)",
    ]
    if plots:
        lines.append("plots:      " + ", ".join(str(p) for p in plots))
    lines += [f"note:       {note}" for note in metrics["notes"]]
    return "\n".join(lines) + "\n"
