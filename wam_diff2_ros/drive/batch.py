"""Several episodes with one loaded model (:func:`run_many`): one folder per scenario, resumable (an episode
whose ``score.json`` is there with every setting that can change it the same is not run again: :func:`_done`),
and a pooled score table (``scores.json``, ``scores.md``), with the reference planners beside it on request
(:func:`run_references`)."""

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
from wam_diff2_ros.drive.run import EXIT_INTERRUPTED, EXIT_OK, episode_settings, run_episode
from wam_diff2_ros.drive.world import ScenarioSpec

TERMS = ("pdms", "nc", "dac", "ep", "ttc", "c")


def _done(folder: Path, spec: ScenarioSpec, model: str, options: EpisodeOptions) -> dict[str, Any] | None:
    """The finished episode in ``folder`` when every setting that can change it is the same (the scenario with its
    duration and seed, the model and its hash, the size, latency, mode and overrides: :func:`episode_settings`)."""
    try:
        document = json.loads((folder / "score.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    same = (
        document.get("scenario") == json.loads(json.dumps(dataclasses.asdict(spec)))
        # a policy at --driver names itself after the session started: its address is in the settings
        and (document.get("model") == model or bool(options.driver))
        and document.get("settings") == episode_settings(options)
        and not document.get("interrupted")
    )
    return document if same else None


def scenario_folders(specs: Sequence[ScenarioSpec], options: EpisodeOptions, model: str) -> dict[str, Path]:
    """Each scenario's folder inside ``options.out``, checked before anything runs
    (:func:`~wam_diff2_ros.drive.folders.episode_folders` with this module's resume rule)."""
    from wam_diff2_ros.drive.folders import episode_folders

    return episode_folders(options.out, specs, options.overwrite, lambda s, f: _done(f, s, model, options))


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
        document = None if options.overwrite else _done(folder, spec, model, options)
        if document is not None:
            log(f"{spec.name}: done before with the same settings, kept")
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
        "completion": score.get("completion"),
        "lane_dev_mean_m": (score.get("lane_deviation_m") or {}).get("mean"),
        "plans_valid": plans["valid"],
        "plans_made": plans["made"],
        "simulated_s": document["simulated_s"],
        "stop_reason": document["stop_reason"],
    }


def _means(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {
        k: float(np.mean([r[k] for r in rows if r[k] is not None]))
        for k in TERMS
        if any(r[k] is not None for r in rows)
    }


def run_references(
    specs: Sequence[ScenarioSpec],
    options: EpisodeOptions,
    rows: list[dict[str, Any]],
    overrides: dict[str, Any],
    log: Callable[[str], None] | None = None,
    drivers: dict[str, str] | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Both reference planners (drive/reference.py), then each outside egodriver policy of ``drivers`` (name →
    address, e.g. carla-driver-interface's ``route_follower``), on ``specs`` into ``options.out/references/<name>/``
    with the model's settings, then the model's table (``rows``) rewritten with them side by side; returns their
    rows."""
    from wam_diff2_ros.drive.planners import planner_identity
    from wam_diff2_ros.drive.reference import REFERENCE_NAMES, reference_config, reference_engine

    planners: list[tuple[str, Any, Any, str]] = []
    for name in REFERENCE_NAMES:
        planners.append((name, reference_config(name, overrides), reference_engine(name), ""))
    for name, address in (drivers or {}).items():
        planners.append((name, reference_config(REFERENCE_NAMES[0], overrides), None, address))
    references: dict[str, list[dict[str, Any]]] = {}
    code = EXIT_OK
    for name, config, engine, address in planners:
        identity = {"driver": address} if address else planner_identity(config)
        ref_options = dataclasses.replace(
            options,
            out=options.out / "references" / name,
            settings={**options.settings, **identity},
            driver=address,
            dds=False,
        )
        references[name], code = run_many(specs, ref_options, config, engine, log)
        write_table(options.out, rows, references)
        if code != EXIT_OK:
            break
    return references, code


def write_table(
    out: Path, rows: list[dict[str, Any]], references: dict[str, list[dict[str, Any]]] | None = None
) -> None:
    """``scores.json`` (rows and their mean) and ``scores.md`` (the same as a table); with ``references`` (planner →
    its rows) also each scenario's PDMS beside theirs, and their rows and means."""
    means = _means(rows)
    document: dict[str, Any] = {"episodes": rows, "mean": means}
    if references:
        document["references"] = {name: {"episodes": r, "mean": _means(r)} for name, r in references.items()}
    write_page(out / "scores.json", json.dumps(document, indent=1))
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
    lines = markdown_table(head, cells)
    if references:
        lines += _side_by_side(rows, references, f)
    write_page(out / "scores.md", "\n".join(lines))


def _side_by_side(
    rows: list[dict[str, Any]], references: dict[str, list[dict[str, Any]]], f: Callable[[Any], str]
) -> list[str]:
    """The PDMS of the model and of each reference planner per scenario (a scenario not run yet: –)."""
    names = list(references)
    by_name = {name: {r["scenario"]: r for r in refs} for name, refs in references.items()}
    cells = [
        [r["scenario"], f(r["pdms"]), *(f(by_name[n].get(r["scenario"], {}).get("pdms")) for n in names)] for r in rows
    ]
    ref_means = [f(_means(references[n]).get("pdms")) if references[n] else "–" for n in names]
    cells.append(["**mean**", f(_means(rows).get("pdms")), *ref_means])
    return [
        "PDMS beside the reference planners (docs/closed_loop.md):",
        "",
        *markdown_table(["scenario", "model", *names], cells),
    ]
