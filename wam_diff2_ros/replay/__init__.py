"""Run the node's planning path over a rosbag2 bag, offline, and evaluate it (``wam-diff2-replay``).

::

    wam-diff2-replay BAG --out DIR --model PATH|demo [--params YAML] [--set key=value ...]
        [--image-topic T ...] [--camera-info-topic T ...] [--odometry-topic T] [--command-topic T]
        [--driving-command-topic T] [--acceleration-topic T] [--rate-hz R] [--device D] [--dtype T]
        [--start S] [--duration D] [--max-plans N] [--detect] [--no-copy-inputs] [--no-plots] [--overwrite]
        [--serve [PORT]] [--serve-speed X]

The bag's messages go, in receive-time order and with their bag receive time, to the node's own
:class:`~wam_diff2_ros.ros.runtime.PlannerRuntime` (the code the node runs, not a copy), whose clock is the
bag time; at the node's planning instants (``planning.rate_hz`` on the clock from the start of the replayed
window, the first one period after it; or, with rate 0, each new front image once every message with the
same receive time has been fed) :meth:`PlannerRuntime.plan` runs. No DDS, no wall clock: the same bag, model
and parameters give the same predictions.

Outputs in ``DIR``:

* ``out/`` — a rosbag2 MCAP bag (``out/out.mcap`` + ``metadata.yaml``) with the node's output topics
  (``/wam_diff2/output/path``, ``/wam_diff2/output/trajectory``, ``/wam_diff2/output/markers``,
  ``/wam_diff2/debug/image``, with ``--detect`` also ``/wam_diff2/output/detections``), each written at
  its planning instant's bag time with the header stamps the node sets, plus (``--copy-inputs``, the
  default) the input topics used and ``/tf``/``/tf_static`` when the bag has them;
* ``predictions.jsonl`` — one line per planning instant that was not idle: stamps, status (``planned``,
  ``blocked`` with the problems, ``error``), prompt, raw text, parsed waypoints, validity, telemetry and
  timings (everything but ``timing`` is deterministic);
* ``metrics.json`` — :func:`wam_diff2_ros.replay.evaluation.compute_metrics` (ADE/FDE at 1/2/3/4 s against
  the ego's actual future from the bag's odometry, in the ego frame at plan time; invalid-answer rate;
  model latency p50/p95/max) plus blocked instants and why, ground-truth availability and run metadata;
* ``report.html`` — one self-contained page: summary, error over the horizon, a sortable / filterable table of
  every instant, each row's predicted and actual path (:mod:`wam_diff2_ros.replay.report_page`; docs/viewer.md);
* ``plots/bev.png``, ``plots/error_over_horizon.png``; ``summary.txt`` (also printed);
  ``detections.jsonl`` with ``--detect``.

Topics: flags, else the ``replay.*`` keys of the parameters file (``replay.image_topics``,
``replay.camera_info_topics``, ``replay.odometry_topic``, ``replay.command_topic``,
``replay.driving_command_topic``, ``replay.acceleration_topic``), else chosen by message type when that is
unambiguous (printed). ``none`` switches an optional input off. Raw or compressed transport follows the
image topic's type.

Exit codes: 0 done; 1 the model could not be loaded or kept failing; 2 bad command line, parameters,
topics or unreadable bag; 3 the bag is damaged or truncated (everything readable before the damage was
replayed and written); 4 the replay ran but no instant could be planned (outputs written, the reasons are
in ``metrics.json`` and the summary); 130 interrupted by Ctrl-C or SIGTERM (outputs so far written).

``--serve [PORT]`` also serves the live Foxglove view (:mod:`wam_diff2_ros.replay.serve`, docs/viewer.md): the
replay waits for a client, then plays at ``--serve-speed`` times real time (0: unpaced).

Modules: ``settings`` (options, parameters → node config and ``RunPlan``, once at the start), ``topics`` (bag
topic → the node's input-table row), ``loop`` (the replay; its planning instants follow the node's rule,
:mod:`wam_diff2_ros.ros.schedule`), ``records`` / ``outputs`` (per-instant files), ``report`` (metrics, plots,
summary), ``report_page`` (``report.html``), ``serve`` (``--serve``), ``evaluation`` / ``plots`` (metrics against
odometry), ``interrupts``, ``progress``, ``state``, ``errors``; the command line is :mod:`wam_diff2_ros.cli.replay`.
"""

from wam_diff2_ros.replay.errors import (
    EXIT_BAG_DAMAGED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_PLANS,
    EXIT_OK,
    EXIT_USAGE,
    ReplayModelError,
    ReplayUsageError,
)
from wam_diff2_ros.replay.interrupts import INTERRUPTS, InterruptGate
from wam_diff2_ros.replay.loop import replay
from wam_diff2_ros.replay.settings import ReplayOptions, build_config, params_hash, parse_set
from wam_diff2_ros.replay.state import ReplayResult
from wam_diff2_ros.replay.topics import TopicMap, TopicRequest, routes, select_topics
from wam_diff2_ros.ros.schedule import InstantSchedule

__all__ = [
    "EXIT_BAG_DAMAGED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NO_PLANS",
    "EXIT_OK",
    "EXIT_USAGE",
    "INTERRUPTS",
    "InstantSchedule",
    "InterruptGate",
    "ReplayModelError",
    "ReplayOptions",
    "ReplayResult",
    "ReplayUsageError",
    "TopicMap",
    "TopicRequest",
    "build_config",
    "params_hash",
    "parse_set",
    "replay",
    "routes",
    "select_topics",
]
