"""An episode from a scenario to its outputs (:func:`run_episode`): the model, the loop, the score, the files.

Outputs in ``out``: ``score.json`` (the PDMS terms per window and for the episode, plans made / valid / used /
rejected, why the episode ended), ``report.html``, ``episode/`` (the MCAP bag) and ``bev.mp4``. Ctrl-C ends the
loop at the next step and writes what there is (``interrupted: true``, exit code 130).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wam_diff2_ros.drive.episode import Episode, EpisodeOptions, EpisodeResult
from wam_diff2_ros.drive.planners import DriveUsageError, node_config  # noqa: F401 (the callers' home of both)
from wam_diff2_ros.drive.vehicle import VehicleLimits
from wam_diff2_ros.drive.world import ScenarioSpec, build_world

EXIT_OK, EXIT_USAGE, EXIT_MODEL, EXIT_INTERRUPTED = 0, 2, 3, 130
OUTPUT_NAMES = ("score.json", "report.html", "episode", "bev.mp4")


def prepare_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise DriveUsageError(f"--out {out}: exists and is not a directory")
    existing = [n for n in OUTPUT_NAMES if (out / n).exists()]
    if existing and not overwrite:
        raise DriveUsageError(f"--out {out}: already holds episode outputs ({', '.join(existing)}); pass --overwrite")
    for name in existing:
        path = out / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    out.mkdir(parents=True, exist_ok=True)


def run_episode(
    spec: ScenarioSpec,
    options: EpisodeOptions,
    config: Any,
    engine: Any,
    log: Callable[[str], None] | None = None,
) -> EpisodeResult:
    """Run one episode with a loaded ``engine`` and write its outputs (see the module docstring)."""
    from wam_diff2_ros.drive.record import Recorder
    from wam_diff2_ros.drive.report import write_report

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    world = build_world(spec)  # scenario errors before anything is written
    prepare_out(options.out, options.overwrite)
    wall_start = time.perf_counter()
    if options.dds:
        from wam_diff2_ros.drive.dds import DdsEpisode

        episode: Episode = DdsEpisode(spec, config, None, options, log, world)
        if not episode.wait_for_planner(options.dds_wait_s):
            episode.close()
            raise DriveUsageError(f"no planner node on the sensor topics within {options.dds_wait_s:g} s")
        mismatch = episode.model_mismatch(config)
        if mismatch:
            episode.close()
            raise DriveUsageError(mismatch)
    elif options.driver:
        episode = _driver_episode(spec, options, config, log, world)
    else:
        episode = Episode(spec, config, engine, options, log, world)
    scenario_json = json.dumps(dataclasses.asdict(spec))
    recorder = Recorder(options.out, world, options.bag, options.video, scenario_json, options.start_ns)
    interrupted = False
    try:
        episode.run(recorder)
    except KeyboardInterrupt:
        interrupted = True
        episode.stop_reason = "interrupted (Ctrl-C or SIGTERM)"
    finally:
        recorder.close()
        if options.dds or options.driver:
            episode.close()
    wall_s = time.perf_counter() - wall_start
    early = not interrupted and not episode.stop_reason.startswith("the scenario's")
    score = episode.scorer.score(episode.trace, episode.samples, spec.duration_s if early else None)
    simulated_s = episode.trace.t[-1] if episode.trace.t else 0.0
    limits = VehicleLimits()
    document = {
        "scenario": dataclasses.asdict(spec),
        "model": getattr(episode, "planner_label", None) or str(getattr(config, "model_path", "")),
        "planner": "driver" if options.driver else _planner_name(config),
        "latency_ms": options.latency_ms,
        "mode": _mode(options),
        "settings": episode_settings(options),
        "stop_reason": episode.stop_reason,
        "interrupted": interrupted,
        "simulated_s": simulated_s,
        "wall_s": wall_s,
        "wall_per_sim_s": wall_s / simulated_s if simulated_s > 0 else None,
        "render_ms_per_frame": 1000.0 * episode.render_s / max(1, len(episode.trace.t)),
        "plans": episode.summary(),
        "score": score,
        "vehicle": dataclasses.asdict(limits),
    }
    if not any(p.valid for p in episode.plans):
        document["score"]["why"] = "no valid plan: " + episode._rejection_summary()
    (options.out / "score.json").write_text(json.dumps(document, indent=1, default=_jsonable), encoding="utf-8")
    if options.report:
        write_report(options.out / "report.html", document, episode)
    return EpisodeResult(options.out, document, EXIT_INTERRUPTED if interrupted else EXIT_OK, interrupted)


def _driver_episode(spec: ScenarioSpec, options: EpisodeOptions, config: Any, log: Any, world: Any) -> Episode:
    """The episode with the egodriver policy at ``options.driver``, its session started."""
    from wam_diff2_ros.drive.egodriver import DriverError, EgodriverEpisode

    try:
        episode = EgodriverEpisode(spec, config, None, options, log, world, address=options.driver)
    except DriverError as exc:
        raise DriveUsageError(str(exc)) from None
    try:
        episode.start_session()
    except DriverError as exc:
        episode.close()
        raise DriveUsageError(str(exc)) from None
    return episode


def episode_settings(options: EpisodeOptions) -> dict[str, Any]:
    """Every setting besides the scenario (its duration and seed included there) that can change an episode: the
    image size, the latency, the mode and ``options.settings`` (the planner, its hash, the overrides)."""
    return json.loads(
        json.dumps(
            {
                **options.settings,
                "size": f"{options.width}x{options.height}",
                "latency_ms": options.latency_ms,
                "mode": _mode(options),
                "driver": options.driver,
                "start_ns": options.start_ns,
            },
            default=_jsonable,
        )
    )


def _planner_name(config: Any) -> str:
    """``expert`` / ``constant-velocity`` for a reference planner, else ``model``."""
    from wam_diff2_ros.drive.reference import is_reference

    model = str(getattr(config, "model_path", ""))
    return model if is_reference(model) else "model"


def _mode(options: EpisodeOptions) -> str:
    return "dds" if options.dds else "driver" if options.driver else "in-process"


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
