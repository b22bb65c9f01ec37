"""One fleet run (:func:`run_fleet`): find the bags, reuse what is complete, replay the rest on Ray, report."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from wam_diff2_ros.fleet.bags import HASH_CACHE_NAME, BagEntry, Fingerprints, FleetUsageError, find_bags, result_key
from wam_diff2_ros.fleet.pool import PoolEvents, RayConfig, ray_session, run_tasks
from wam_diff2_ros.fleet.progress import FleetProgress
from wam_diff2_ros.fleet.report import build_report, write_report
from wam_diff2_ros.fleet.results import (
    DONE,
    FAILED,
    SKIPPED,
    BagRecord,
    foreign_folders,
    read_record,
    record_failure,
    remove_leftovers,
    reusable,
    write_json,
)
from wam_diff2_ros.fleet.worker import BagTask
from wam_diff2_ros.replay import ReplayOptions

EXIT_OK = 0  # every bag replayed (damaged bags to their damage; see the report's notes)
EXIT_SETUP = 1  # Ray could not start, or the model cannot be found
EXIT_USAGE = 2
EXIT_SOME_FAILED = 3  # some bags failed (recorded with their reasons); the others' results are complete
EXIT_INTERRUPTED = 130
SUMMARY_JSON = "fleet_summary.json"
#: Replay options that are per bag or per process, not part of a result's identity.
_NOT_SETTINGS = ("bag", "out", "progress", "overwrite", "params")


@dataclass
class FleetOptions:
    """A fleet run: the inputs, the output folder, the replay settings every bag gets, and Ray's."""

    inputs: list[Path]
    out: Path
    replay: ReplayOptions
    ray: RayConfig = field(default_factory=RayConfig)
    progress: bool = True


@dataclass
class FleetResult:
    """What the run did: each bag's record, the report's paths, the summary and the exit code."""

    exit_code: int
    records: list[BagRecord]
    summary: dict[str, Any]
    paths: list[Path]
    notes: list[str]


def settings_identity(options: ReplayOptions, fingerprints: Fingerprints) -> dict[str, Any]:
    """Everything besides the bag that decides its result: the replay settings, the parameters file's content,
    the model's content hash and the package version."""
    from wam_diff2_ros import __version__
    from wam_diff2_ros.demo.resolve import is_model_name, resolve_model
    from wam_diff2_ros.replay.settings import choose_model_path, read_params

    values, _ = read_params(options)
    model, _how = choose_model_path(options.model, str(values.get("model.path") or ""))
    checkpoint = Path(resolve_model(model) if is_model_name(model) else model)
    if not checkpoint.is_dir():
        raise FleetUsageError(f"model {model}: not a checkpoint directory")
    settings = {k: v for k, v in asdict(options).items() if k not in _NOT_SETTINGS}
    return {
        **settings,
        "params_sha256": fingerprints.file(options.params) if options.params else None,
        "model": str(checkpoint),
        "model_sha256": fingerprints.model(checkpoint),
        "package_version": __version__,
    }


def _entry_record(entry: BagEntry, status: str, reason: str | None = None) -> BagRecord:
    return BagRecord(name=entry.name, bag=str(entry.path), status=status, size_bytes=entry.size_bytes, reason=reason)


def run_fleet(options: FleetOptions, stream: TextIO | None = None) -> FleetResult:
    """Run the fleet (see :mod:`wam_diff2_ros.fleet`). Raises :class:`FleetUsageError` for bad inputs and
    :class:`~wam_diff2_ros.fleet.pool.FleetSetupError` when Ray cannot start; every bag's failure is recorded."""
    stream = stream or sys.stderr
    started = time.perf_counter()
    out = options.out
    entries = find_bags(options.inputs, out)
    if out.exists() and not out.is_dir():
        raise FleetUsageError(f"--out {out}: exists and is not a directory")
    foreign = foreign_folders(out, [e.name for e in entries])
    if foreign:
        raise FleetUsageError(
            f"{foreign[0]}: exists and is not a fleet result (no fleet.json); the fleet replaces only its own "
            "results: move it or choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    fingerprints = Fingerprints(out / HASH_CACHE_NAME)
    settings = settings_identity(options.replay, fingerprints)
    records: dict[str, BagRecord] = {}
    tasks: list[BagTask] = []
    for entry in entries:
        if entry.missing:
            records[entry.name] = _entry_record(entry, FAILED, entry.missing)
            record_failure(out, records[entry.name])
            continue
        try:
            bag_hash = fingerprints.bag(entry)
        except OSError as exc:
            records[entry.name] = _entry_record(entry, FAILED, f"cannot read it: {exc}")
            record_failure(out, records[entry.name])
            continue
        key = result_key(bag_hash, settings)
        done = reusable(out, entry.name, key)
        if done is not None:
            records[entry.name] = done
            continue
        tasks.append(BagTask(entry.name, entry.path, out, options.replay, key, bag_hash, entry.size_bytes))
    fingerprints.save()
    skipped = len(entries) - len(tasks) - sum(r.status == FAILED for r in records.values())
    progress = FleetProgress(
        total=len(entries),
        skipped=skipped,
        failed=len(records) - skipped,
        todo_bytes=sum(t.size_bytes for t in tasks),
        stream=stream,
        enabled=options.progress,
    )
    progress.tick([], force=True)
    events = PoolEvents(started=progress.started, finished=progress.finished_bag, tick=progress.tick)
    interrupted = False
    try:
        if tasks:
            with ray_session(options.ray) as ray:
                for record in run_tasks(ray, tasks, options.ray, events):
                    records[record.name] = record
    except KeyboardInterrupt:
        interrupted = True
    for entry in entries:  # the committed state, in input order (what an interrupted run finished, too)
        if entry.name not in records:
            records[entry.name] = read_record(out, entry.name) or _entry_record(entry, FAILED, "not replayed")
    ordered = [records[e.name] for e in entries]
    report = build_report(out, ordered, settings)
    paths = write_report(out, report)
    replayed_now = {t.name for t in tasks}
    summary = {
        "bags": len(entries),
        "replayed": sum(r.status == DONE and r.name in replayed_now for r in ordered),
        SKIPPED: sum(r.status == DONE and r.name not in replayed_now for r in ordered),
        FAILED: sum(r.status != DONE for r in ordered),
        "failures": {r.name: r.reason for r in ordered if r.status != DONE},
        "plans": sum(r.plans for r in ordered if r.name in replayed_now),
        "plans_per_s": progress.plans_per_s(),
        "wall_s": time.perf_counter() - started,
        "workers": events.workers,
        "ray_address": options.ray.address or "embedded",
        "pooled": {k: report["pooled"][k] for k in ("plans", "valid_rate", "ade_4s", "fde_4s", "latency_ms_p50")},
        "report": str(out / "fleet_report.md"),
        "notes": events.notes,
        "interrupted": interrupted,
    }
    write_json(out / SUMMARY_JSON, summary)
    progress.tick([], force=True)
    if interrupted:
        code = EXIT_INTERRUPTED
    elif summary[FAILED]:
        code = EXIT_SOME_FAILED
    else:
        code = EXIT_OK
    return FleetResult(code, ordered, summary, [*paths, out / SUMMARY_JSON], events.notes)
