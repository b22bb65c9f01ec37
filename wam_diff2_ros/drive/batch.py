"""Several episodes with one loaded model (:func:`run_many`): one folder per scenario, resumable (an episode
whose ``score.json`` is there for the same scenario, seed, model and latency is not run again), and a pooled
score table (``scores.json``, ``scores.md``)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wam_diff2_ros.core.markup import write_page
from wam_diff2_ros.core.tables import markdown_table
from wam_diff2_ros.drive.episode import EpisodeOptions
from wam_diff2_ros.drive.run import EXIT_INTERRUPTED, EXIT_OK, run_episode
from wam_diff2_ros.drive.world import ScenarioSpec

TERMS = ("pdms", "nc", "dac", "ep", "ttc", "c")


def _done(folder: Path, spec: ScenarioSpec, model: str, latency_ms: float | None) -> dict[str, Any] | None:
    try:
        document = json.loads((folder / "score.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    same = (
        document.get("scenario") == json.loads(json.dumps(dataclasses.asdict(spec)))
        and document.get("model") == model
        and document.get("latency_ms") == latency_ms
        and not document.get("interrupted")
    )
    return document if same else None


def scenario_folders(specs: Sequence[ScenarioSpec], options: EpisodeOptions, model: str) -> dict[str, Path]:
    """Each scenario's folder inside ``options.out``, checked before anything runs
    (:func:`~wam_diff2_ros.drive.folders.episode_folders` with this module's resume rule)."""
    from wam_diff2_ros.drive.folders import episode_folders

    return episode_folders(options.out, specs, options.overwrite, lambda s, f: _done(f, s, model, options.latency_ms))


def run_many(
    specs: Sequence[ScenarioSpec],
    options: EpisodeOptions,
    config: Any,
    engine: Any,
    log: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Run (or resume) every scenario into ``options.out/<name>/``; returns the rows of the pooled table and the
    exit code."""
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    model = str(config.model_path)
    folders = scenario_folders(specs, options, model)
    options.out.mkdir(parents=True, exist_ok=True)
    rows = []
    code = EXIT_OK
    for spec in specs:
        folder = folders[spec.name]
        document = None if options.overwrite else _done(folder, spec, model, options.latency_ms)
        if document is not None:
            log(f"{spec.name}: done before, kept")
        else:
            log(f"{spec.name}: running {spec.duration_s:g} s (seed {spec.seed})")
            episode_options = dataclasses.replace(options, out=folder, overwrite=True)
            result = run_episode(spec, episode_options, config, engine, log)
            document = result.score
            if result.interrupted:
                code = EXIT_INTERRUPTED
        rows.append(_row(spec, document))
        write_table(options.out, rows)
        if code == EXIT_INTERRUPTED:
            break
    return rows, code


def _row(spec: ScenarioSpec, document: dict[str, Any]) -> dict[str, Any]:
    score, plans = document["score"], document["plans"]
    return {
        "scenario": spec.name,
        "seed": spec.seed,
        **{k: score.get(k) for k in TERMS},
        "lane_dev_mean_m": (score.get("lane_deviation_m") or {}).get("mean"),
        "plans_valid": plans["valid"],
        "plans_made": plans["made"],
        "simulated_s": document["simulated_s"],
        "stop_reason": document["stop_reason"],
    }


def write_table(out: Path, rows: list[dict[str, Any]]) -> None:
    """``scores.json`` (rows and their mean) and ``scores.md`` (the same as a table)."""
    means = {
        k: float(np.mean([r[k] for r in rows if r[k] is not None]))
        for k in TERMS
        if any(r[k] is not None for r in rows)
    }
    write_page(out / "scores.json", json.dumps({"episodes": rows, "mean": means}, indent=1))
    head = ["scenario", "seed", *TERMS, "lane dev m", "valid/made", "sim s", "ended"]

    def f(v: Any) -> str:
        return "–" if v is None else f"{v:.3f}"

    cells = []
    for r in rows:
        plans = f"{r['plans_valid']}/{r['plans_made']}"
        terms = [f(r[k]) for k in TERMS]
        ended = f"{r['simulated_s']:.1f}", r["stop_reason"]
        cells.append([r["scenario"], r["seed"], *terms, f(r["lane_dev_mean_m"]), plans, *ended])
    cells.append(["**mean**", "", *(f(means.get(k)) for k in TERMS), "", "", "", ""])
    write_page(out / "scores.md", "\n".join(markdown_table(head, cells)))
