"""Evaluate a checkpoint over many bags on Ray (``wam-diff2-fleet``).

::

    wam-diff2-fleet BAG|DIR|MANIFEST ... --out DIR --model PATH|demo [every wam-diff2-replay setting]
        [--workers N] [--cpus-per-worker C] [--gpus-per-worker G] [--ray-address auto|ray://HOST:PORT]

Each bag goes through the replay's own per-bag function (:func:`wam_diff2_ros.replay.replay`: the node's
``PlannerRuntime``, input table and schedule), on Ray actors that load the model once each
(:mod:`~wam_diff2_ros.fleet.worker`, :mod:`~wam_diff2_ros.fleet.pool`). Without ``--ray-address`` Ray starts
inside the command on this machine's cores, listening on 127.0.0.1 only, with a token made for the run
(:mod:`~wam_diff2_ros.fleet.local_ray`).

Outputs in ``DIR``: ``bags/<name>/`` per bag — the replay's outputs (``out/``, ``predictions.jsonl``,
``metrics.json``, ``plots/``, ``summary.txt``) plus ``fleet.json`` (status, reason, result key) and
``odometry.json`` (the ground-truth track), committed atomically (:mod:`~wam_diff2_ros.fleet.results`);
``fleet_report.json`` / ``fleet_report.md`` / ``plots/`` (:mod:`~wam_diff2_ros.fleet.report`: per bag and
pooled, recomputed from the predictions); ``fleet_summary.json``; ``hashes.json`` (file hashes by size and
modification time).

A rerun with the same ``--out`` skips every bag whose result is complete for the same bag content, settings
and model (:func:`~wam_diff2_ros.fleet.bags.result_key`); failed bags are tried again.

Exit codes: 0 every bag replayed; 1 Ray or the model could not start; 2 bad command line or inputs; 3 some
bags failed (each recorded with its reason; the others complete); 130 interrupted.
"""

from wam_diff2_ros.fleet.bags import BagEntry, Fingerprints, FleetUsageError, find_bags, result_key
from wam_diff2_ros.fleet.driver import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SETUP,
    EXIT_SOME_FAILED,
    EXIT_USAGE,
    FleetOptions,
    FleetResult,
    run_fleet,
)
from wam_diff2_ros.fleet.pool import FleetSetupError, RayConfig
from wam_diff2_ros.fleet.results import DONE, FAILED, SKIPPED, BagRecord

__all__ = [
    "DONE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SETUP",
    "EXIT_SOME_FAILED",
    "EXIT_USAGE",
    "FAILED",
    "SKIPPED",
    "BagEntry",
    "BagRecord",
    "Fingerprints",
    "FleetOptions",
    "FleetResult",
    "FleetSetupError",
    "FleetUsageError",
    "RayConfig",
    "find_bags",
    "result_key",
    "run_fleet",
]
