"""Many episodes on the fleet's Ray workers (``wam-diff2-drive ... --workers N``): each worker (a Ray actor,
:class:`EpisodeWorker`) loads the model once and runs episode after episode into its own folder; the driver skips
finished episodes (resume), hands out the rest as workers free up, and writes the pooled table as results come
in. Ray is started embedded, or joined with ``--ray-address`` (:func:`wam_diff2_ros.fleet.pool.ray_session`)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from wam_diff2_ros.drive.batch import _done, _row, scenario_folders, write_table
from wam_diff2_ros.drive.episode import EpisodeOptions
from wam_diff2_ros.drive.world import ScenarioSpec


class EpisodeWorker:
    """One model, many episodes (a plain class; :func:`run_on_ray` makes it a Ray actor)."""

    def __init__(self, model: str, device: str | None, overrides: dict[str, Any]) -> None:
        from wam_diff2_ros.drive.planners import load_planner, planner_config

        self.config = planner_config(model, device, overrides)
        self.engine = load_planner(self.config)

    def run(self, spec: ScenarioSpec, options: EpisodeOptions) -> dict[str, Any]:
        """Run one episode; returns its ``score.json`` content."""
        from wam_diff2_ros.drive.run import run_episode

        result = run_episode(spec, options, self.config, self.engine, log=lambda _text: None)
        return json.loads(json.dumps(result.score, default=str))


def run_on_ray(
    specs: Sequence[ScenarioSpec],
    options: EpisodeOptions,
    model: str,
    device: str | None,
    overrides: dict[str, Any],
    workers: int,
    address: str | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Run (or resume) every scenario on ``workers`` Ray actors; returns the pooled rows and the exit code."""
    from wam_diff2_ros.drive.planners import planner_config
    from wam_diff2_ros.fleet.pool import RayConfig, ray_session

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    model_path = str(planner_config(model, device, overrides).model_path)
    folders = scenario_folders(specs, options, model_path)
    options.out.mkdir(parents=True, exist_ok=True)
    documents: dict[str, dict[str, Any]] = {}
    todo = []
    for spec in specs:
        done = None if options.overwrite else _done(folders[spec.name], spec, model_path, options)
        if done is not None:
            documents[spec.name] = done
            log(f"{spec.name}: done before with the same settings, kept")
        else:
            todo.append(spec)
    if todo:
        config = RayConfig(address=address, workers=workers, num_cpus=None if address else workers)
        with ray_session(config) as ray:
            actor = ray.remote(num_cpus=1)(EpisodeWorker)
            pool = [actor.remote(model, device, overrides) for _ in range(min(workers, len(todo)))]
            running: dict[Any, tuple[Any, ScenarioSpec]] = {}
            queue = list(todo)
            free = list(pool)
            while queue or running:
                while queue and free:
                    spec, worker = queue.pop(0), free.pop(0)
                    episode = dataclasses.replace(options, out=folders[spec.name], overwrite=True)
                    log(f"{spec.name}: running {spec.duration_s:g} s (seed {spec.seed})")
                    running[worker.run.remote(spec, episode)] = (worker, spec)
                ready, _ = ray.wait(list(running), num_returns=1)
                worker, spec = running.pop(ready[0])
                documents[spec.name] = ray.get(ready[0])
                free.append(worker)
                write_table(options.out, [_row(s, documents[s.name]) for s in specs if s.name in documents])
    rows = [_row(s, documents[s.name]) for s in specs if s.name in documents]
    write_table(options.out, rows)
    return rows, 0
