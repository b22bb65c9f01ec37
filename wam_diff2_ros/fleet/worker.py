"""The fleet's worker (a Ray actor, :class:`BagWorker`): one model load, then bag after bag through the replay's
own per-bag function (:func:`wam_diff2_ros.replay.replay`, the code ``wam-diff2-replay`` runs).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wam_diff2_ros.fleet.results import (
    BAGS_DIR,
    DONE,
    FAILED,
    ODOMETRY_NAME,
    BagRecord,
    commit,
    new_tmp_dir,
    write_json,
)
from wam_diff2_ros.replay import EXIT_BAG_DAMAGED, EXIT_NO_PLANS, EXIT_OK, ReplayOptions

#: Test hook: ``name`` (or ``name:always``; several comma-separated) makes the worker process exit abruptly in the
#: middle of that bag, on its first attempt (or on every attempt), as a worker killed by the OS or a lost node would.
CRASH_ENV = "WAM_DIFF2_FLEET_CRASH"
DONE_EXIT_CODES = (EXIT_OK, EXIT_BAG_DAMAGED, EXIT_NO_PLANS)


@dataclass(frozen=True)
class BagTask:
    """One bag to replay: where it is, where its result goes, the run's replay settings and the result key."""

    name: str
    bag: Path
    out: Path
    options: ReplayOptions
    key: str
    bag_sha256: str
    size_bytes: int

    def failed_record(self, attempt: int, worker: str | None, reason: str | None = None) -> BagRecord:
        """This bag's record as failed on ``attempt`` by ``worker`` (a replay's outcome then fills it in)."""
        return BagRecord(
            name=self.name,
            bag=str(self.bag),
            status=FAILED,
            key=self.key,
            bag_sha256=self.bag_sha256,
            size_bytes=self.size_bytes,
            reason=reason,
            attempts=attempt,
            worker=worker,
        )


def _point_summary_at_final_place(tmp: Path, final: Path) -> None:
    """``summary.txt`` names its output files: name them where they will be once committed."""
    summary = tmp / "summary.txt"
    if summary.is_file():
        summary.write_text(summary.read_text(encoding="utf-8").replace(str(tmp), str(final)), encoding="utf-8")


class _SharedEngine:
    """The worker's loaded engine as the replay sees it: ``close`` keeps the model for the next bag."""

    def __init__(self, engine: Any, crash_at_plan: int | None) -> None:
        self._engine = engine
        self._crash_at_plan = crash_at_plan
        self._plans = 0

    def __getattr__(self, name: str) -> Any:
        if name in ("generate", "generate_conversations") and self._crash_at_plan is not None:
            self._plans += 1
            if self._plans >= self._crash_at_plan:
                os._exit(17)  # the test hook: die mid-bag, outputs half written
        return getattr(self._engine, name)

    def close(self) -> None:
        """Nothing: the worker closes the engine when it ends."""


class BagWorker:
    """Holds one loaded engine (per model, device, dtype and pixel limits) and replays bags with it."""

    def __init__(self, worker_id: str, threads: int | None = None, crash: str | None = None) -> None:
        self.worker_id = worker_id
        self.crash = crash
        self._engines: dict[tuple[Any, ...], Any] = {}
        if threads:
            import torch

            torch.set_num_threads(max(1, int(threads)))

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()

    def _engine_for(self, config: Any, crash_at_plan: int | None) -> _SharedEngine:
        from wam_diff2_ros.ros.node import load_engine

        key = (config.model_path, config.device, config.dtype, config.min_pixels, config.max_pixels)
        if key not in self._engines:
            for engine in self._engines.values():  # a different model: one at a time on the device
                engine.close()
            self._engines = {key: load_engine(config)}
        return _SharedEngine(self._engines[key], crash_at_plan)

    def _crash_at_plan(self, name: str, attempt: int) -> int | None:
        """The test hook (:data:`CRASH_ENV`): comma-separated ``name`` or ``name:always``."""
        for item in (self.crash or "").split(","):
            target, _, when = item.strip().partition(":")
            if target == name and (attempt == 1 or when == "always"):
                return 2  # during the second plan: the first one's outputs are written
        return None

    def replay_bag(self, task: BagTask, attempt: int = 1, tmp_name: str | None = None) -> dict[str, Any]:
        """Replay one bag into a temporary folder (``tmp_name`` under ``OUT/bags``, else a fresh one), then commit
        it as ``OUT/bags/<name>``; returns its record."""
        from wam_diff2_ros.replay import ReplayModelError, ReplayUsageError, replay

        started = time.perf_counter()
        record = task.failed_record(attempt, self.worker_id)
        tmp = new_tmp_dir(task.out, task.name, tmp_name)
        options = replace(task.options, bag=task.bag, out=tmp, progress=False, overwrite=False)
        crash_at = self._crash_at_plan(task.name, attempt)
        try:
            result = replay(
                options, engine_factory=lambda config: self._engine_for(config, crash_at), log=record.log.append
            )
        except (ReplayUsageError, ReplayModelError) as exc:
            record.reason = str(exc)
        except Exception as exc:  # one bag must never end the worker
            record.reason = f"unexpected {type(exc).__name__}: {exc}"
        else:
            record.exit_code = result.exit_code
            record.status = DONE if result.exit_code in DONE_EXIT_CODES else FAILED
            record.reason = result.error
            record.plans = int(result.metrics.get("num_instants", 0))
            record.planning_instants = int(result.metrics.get("planning_instants", 0))
            record.model_load_s = float(result.metrics.get("run", {}).get("model_load_s", 0.0))
            write_json(tmp / ODOMETRY_NAME, [list(row) for row in result.odometry])
            _point_summary_at_final_place(tmp, task.out / BAGS_DIR / task.name)
        record.wall_s = time.perf_counter() - started
        commit(tmp, task.out, record)
        return record.to_json()

    def close(self) -> None:
        """Release the engines."""
        for engine in self._engines.values():
            engine.close()
        self._engines = {}
