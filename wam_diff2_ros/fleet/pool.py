"""Ray for the fleet: start it embedded or join a cluster (:func:`ray_session`), and run the bags on a pool of
:class:`~wam_diff2_ros.fleet.worker.BagWorker` actors, largest bag first, replacing a worker that dies and
retrying its bag once (:func:`run_tasks`).
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wam_diff2_ros.fleet.local_ray import LOOPBACK, local_ray_environment
from wam_diff2_ros.fleet.results import BagRecord, bags_root, record_failure, tmp_dir_name
from wam_diff2_ros.fleet.worker import CRASH_ENV, BagTask, BagWorker

MAX_ATTEMPTS = 2  # a bag whose worker died is retried once, on a fresh worker
POLL_S = 2.0  # how often the progress line may be refreshed while bags run


class FleetSetupError(Exception):
    """Ray is missing or cannot start / reach the cluster (exit code 1)."""


@dataclass
class RayConfig:
    """Where the workers run and what each one holds."""

    address: str | None = None  # None: start Ray inside this process (embedded); "auto" or "ray://host:port"
    workers: int | None = None  # None: as many as the resources hold (cores / cpus_per_worker, or GPUs)
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    num_cpus: int | None = None  # embedded Ray only: the cores it may use (None: this machine's)
    object_store_mb: int = 256  # embedded Ray only: results are small JSON, the bags never enter the store
    dashboard: bool = False
    log_to_driver: bool = False  # workers' stdout/stderr on this terminal


def import_ray() -> Any:
    """``ray``, or :class:`FleetSetupError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise FleetSetupError("Ray is not installed: pip install 'wam_diff2_ros[fleet]' (or pip install ray)") from None
    return ray


@contextmanager
def ray_session(config: RayConfig) -> Iterator[Any]:
    """Ray started (embedded: on this machine only, see :mod:`~wam_diff2_ros.fleet.local_ray`) or connected for
    the block; shut down after."""
    ray = import_ray()
    if config.address is not None:
        with _started(ray, config, {"address": config.address, "log_to_driver": config.log_to_driver}):
            yield ray
        return
    kwargs: dict[str, Any] = {
        "address": "local",  # a new Ray here, whatever RAY_ADDRESS says: a cluster is chosen with --ray-address
        "num_cpus": config.num_cpus or os.cpu_count() or 1,
        "object_store_memory": config.object_store_mb << 20,
        "include_dashboard": config.dashboard,
        "dashboard_host": LOOPBACK,
        "log_to_driver": config.log_to_driver,
        "configure_logging": False,
    }
    with local_ray_environment(), _started(ray, config, kwargs):
        address = ray.util.get_node_ip_address()
        if address != LOOPBACK:
            raise FleetSetupError(f"embedded Ray came up on {address}, not {LOOPBACK}; use --ray-address for a cluster")
        yield ray


@contextmanager
def _started(ray: Any, config: RayConfig, kwargs: dict[str, Any]) -> Iterator[None]:
    try:
        ray.init(**kwargs)
    except Exception as exc:
        where = "embedded Ray" if config.address is None else f"the Ray cluster at {config.address}"
        raise FleetSetupError(f"cannot start {where}: {type(exc).__name__}: {exc}") from None
    try:
        yield
    finally:
        ray.shutdown()


def worker_count(config: RayConfig, resources: dict[str, float], num_bags: int) -> int:
    """``--workers``, else what the cluster's resources hold; never more than there are bags."""
    if config.workers is not None:
        wanted = config.workers
    elif config.gpus_per_worker > 0:
        wanted = int(resources.get("GPU", 0) // config.gpus_per_worker)
    else:
        wanted = int(resources.get("CPU", 1) // max(config.cpus_per_worker, 1e-9))
    return max(1, min(wanted, num_bags))


@dataclass
class Slot:
    """One worker place: its actor, the bag it runs and what it has done."""

    index: int
    actor: Any = None
    task: BagTask | None = None
    attempt: int = 0
    tmp_name: str = ""
    future: Any = None
    started_s: float = 0.0
    done: int = 0
    plans: int = 0
    replaced: int = 0

    @property
    def label(self) -> str:
        return f"w{self.index}"


@dataclass
class PoolEvents:
    """Callbacks for progress: a bag started on a slot, a bag finished, the periodic refresh."""

    started: Callable[[Slot], None] = lambda slot: None
    finished: Callable[[Slot, BagRecord], None] = lambda slot, record: None
    tick: Callable[[Sequence[Slot]], None] = lambda slots: None
    notes: list[str] = field(default_factory=list)
    workers: int = 0


def run_tasks(ray: Any, tasks: Sequence[BagTask], config: RayConfig, events: PoolEvents) -> list[BagRecord]:
    """Replay ``tasks`` on the actors, largest bag first; every task ends with a committed record."""
    if not tasks:
        return []
    count = worker_count(config, ray.cluster_resources(), len(tasks))
    events.workers = count
    remote = ray.remote(
        num_cpus=config.cpus_per_worker, num_gpus=config.gpus_per_worker, max_restarts=0, max_task_retries=0
    )(BagWorker)
    threads = max(1, math.floor(config.cpus_per_worker))
    crash = os.environ.get(CRASH_ENV) or None

    def new_actor(slot: Slot) -> Any:
        return remote.remote(f"{slot.label}.{slot.replaced}", threads, crash)

    slots = [Slot(i) for i in range(count)]
    for slot in slots:
        slot.actor = new_actor(slot)
    queue: deque[tuple[BagTask, int]] = deque((t, 1) for t in sorted(tasks, key=lambda t: -t.size_bytes))
    records: list[BagRecord] = []
    try:
        while queue or any(s.future is not None for s in slots):
            for slot in slots:
                if slot.future is None and queue:
                    slot.task, slot.attempt = queue.popleft()
                    slot.tmp_name = tmp_dir_name(slot.task.name)  # removed here if the worker dies
                    slot.future = slot.actor.replay_bag.remote(slot.task, slot.attempt, slot.tmp_name)
                    slot.started_s = time.perf_counter()
                    events.started(slot)
            busy = {s.future: s for s in slots if s.future is not None}
            ready, _ = ray.wait(list(busy), num_returns=1, timeout=POLL_S)
            for future in ready:
                slot = busy[future]
                record = _collect(ray, future, slot, queue, events, new_actor)
                if record is not None:
                    records.append(record)
                    slot.done += 1
                    slot.plans += record.plans
                    events.finished(slot, record)
            events.tick(slots)
    finally:
        for slot in slots:
            if slot.actor is not None:
                ray.kill(slot.actor)
    return records


def _collect(
    ray: Any,
    future: Any,
    slot: Slot,
    queue: deque[tuple[BagTask, int]],
    events: PoolEvents,
    new_actor: Callable[[Slot], Any],
) -> BagRecord | None:
    """The finished bag's record; a dead worker is replaced and its bag queued again (once)."""
    task, attempt = slot.task, slot.attempt
    assert task is not None
    slot.future, slot.task = None, None
    try:
        return BagRecord.from_json(ray.get(future))
    except ray.exceptions.RayActorError as exc:
        reason = f"the worker died while replaying it ({type(exc).__name__})"
        shutil.rmtree(bags_root(Path(task.out)) / slot.tmp_name, ignore_errors=True)  # its half-written outputs
        slot.replaced += 1
        ray.kill(slot.actor)
        slot.actor = new_actor(slot)
        events.notes.append(f"{slot.label}: {reason}: {task.name}; worker replaced")
        if attempt < MAX_ATTEMPTS:
            queue.appendleft((task, attempt + 1))
            return None
        reason = f"{reason}, on {attempt} attempts"
    except Exception as exc:  # an error outside the replay's own handling (e.g. the result folder unwritable)
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
    record = task.failed_record(attempt, slot.label, reason)
    record_failure(Path(task.out), record)
    return record
