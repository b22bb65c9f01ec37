"""``wam-diff2-replay``: run the node's planning path over a rosbag2 bag, offline, and evaluate it.

::

    wam-diff2-replay BAG --out DIR --model PATH|demo [--params YAML] [--set key=value ...]
        [--image-topic T ...] [--camera-info-topic T ...] [--odometry-topic T] [--command-topic T]
        [--driving-command-topic T] [--acceleration-topic T] [--rate-hz R] [--device D] [--dtype T]
        [--start S] [--duration D] [--max-plans N] [--detect] [--no-copy-inputs] [--no-plots] [--overwrite]

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
* ``metrics.json`` — :func:`wam_diff2_ros.tools.evaluation.compute_metrics` (ADE/FDE at 1/2/3/4 s against
  the ego's actual future from the bag's odometry, in the ego frame at plan time; invalid-answer rate;
  model latency p50/p95/max) plus blocked instants and why, ground-truth availability and run metadata;
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
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BAG_DAMAGED = 3
EXIT_NO_PLANS = 4
EXIT_INTERRUPTED = 130

NODE_PREFIX = "/wam_diff2"
OUTPUT_TOPICS = {
    "path": f"{NODE_PREFIX}/output/path",
    "trajectory": f"{NODE_PREFIX}/output/trajectory",
    "markers": f"{NODE_PREFIX}/output/markers",
    "detections": f"{NODE_PREFIX}/output/detections",
    "debug_image": f"{NODE_PREFIX}/debug/image",
}
BAG_DIR_NAME = "out"
OUTPUT_NAMES = (
    BAG_DIR_NAME,
    "predictions.jsonl",
    "detections.jsonl",
    "metrics.json",
    "summary.txt",
    "plots",
)

IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"
ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
STRING_TYPE = "std_msgs/msg/String"
DRIVING_COMMAND_TYPE = "wam_diff2_ros/msg/DrivingCommand"
ACCELERATION_TYPE = "geometry_msgs/msg/AccelWithCovarianceStamped"
TF_TOPICS = ("/tf", "/tf_static")

REPLAY_KEYS = {
    "replay.image_topics": "image_topics",
    "replay.camera_info_topics": "camera_info_topics",
    "replay.odometry_topic": "odometry_topic",
    "replay.command_topic": "command_topic",
    "replay.driving_command_topic": "driving_command_topic",
    "replay.acceleration_topic": "acceleration_topic",
}
NONE_WORDS = ("none", "off", "")
MAX_CONSECUTIVE_ENGINE_ERRORS = 3
GROUND_TRUTH_MARGIN_S = 0.5
_NS = 1_000_000_000


class ReplayUsageError(Exception):
    """Bad command line, parameters, topics or bag (exit code 2)."""


class ReplayModelError(Exception):
    """The model cannot be loaded (exit code 1)."""


# --------------------------------------------------------------------------------------------
# Topics


@dataclass
class TopicRequest:
    """Topics asked for by flags or the parameters file (None = choose by type, ``"none"`` = off)."""

    image_topics: list[str] | None = None
    camera_info_topics: list[str] | None = None
    odometry_topic: str | None = None
    command_topic: str | None = None
    driving_command_topic: str | None = None
    acceleration_topic: str | None = None

    def merged(self, fallback: TopicRequest) -> TopicRequest:
        """Fields of ``self``, where unset those of ``fallback``."""
        return TopicRequest(
            **{
                name: getattr(self, name) if getattr(self, name) is not None else getattr(fallback, name)
                for name in self.__dataclass_fields__
            }
        )


@dataclass
class TopicMap:
    """The bag topics feeding each input of the runtime (None = not used)."""

    images: list[tuple[str, str]]  # (topic, transport raw|compressed), camera order
    camera_infos: list[str | None]
    odometry: str | None
    command: str | None
    driving_command: str | None
    acceleration: str | None
    notes: list[str] = field(default_factory=list)

    def inputs(self) -> list[str]:
        """Every topic read as an input."""
        topics = [t for t, _ in self.images] + [t for t in self.camera_infos if t]
        topics += [t for t in (self.odometry, self.command, self.driving_command, self.acceleration) if t]
        return topics

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description (for metrics.json)."""
        return {
            "images": [{"topic": t, "transport": k} for t, k in self.images],
            "camera_infos": list(self.camera_infos),
            "odometry": self.odometry,
            "command": self.command,
            "driving_command": self.driving_command,
            "acceleration": self.acceleration,
        }


def _is_node_output(topic: str) -> bool:
    parts = topic.strip("/").split("/")
    return any(parts[i] == "wam_diff2" and parts[i + 1] in ("output", "debug") for i in range(len(parts) - 1))


def _is_off(value: str | None) -> bool:
    return value is not None and value.strip().lower() in NONE_WORDS


def _by_type(topics: Mapping[str, Any], *types: str) -> list[str]:
    return sorted(
        name for name, info in topics.items() if info.msgtype in types and not _is_node_output(name) and info.count > 0
    )


def _listing(topics: Mapping[str, Any], names: Sequence[str]) -> str:
    return ", ".join(f"{n} ({topics[n].msgtype}, {topics[n].count} msgs)" for n in names)


def _check_topic(topics: Mapping[str, Any], topic: str, flag: str, types: Sequence[str]) -> None:
    if topic not in topics:
        available = "\n    ".join(f"{n}  [{i.msgtype}, {i.count} msgs]" for n, i in topics.items())
        raise ReplayUsageError(f"{flag} {topic}: no such topic in the bag. The bag has:\n    {available}")
    if topics[topic].msgtype not in types:
        raise ReplayUsageError(f"{flag} {topic}: has type {topics[topic].msgtype}, expected {' or '.join(types)}")


def _single(
    topics: Mapping[str, Any],
    requested: str | None,
    flag: str,
    types: Sequence[str],
    what: str,
    notes: list[str],
    prefer: Callable[[str], bool] | None = None,
) -> str | None:
    if _is_off(requested):
        notes.append(f"{what}: off ({flag} none)")
        return None
    if requested is not None:
        _check_topic(topics, requested, flag, types)
        return requested
    candidates = _by_type(topics, *types)
    if not candidates:
        if what != "command":
            notes.append(f"{what}: the bag has no {' / '.join(types)} topic")
        return None
    if len(candidates) > 1 and prefer is not None:
        preferred = [c for c in candidates if prefer(c)]
        if len(preferred) == 1:
            notes.append(f"{what}: {preferred[0]} (of {len(candidates)} {types[0]} topics, by its name)")
            return preferred[0]
    if len(candidates) > 1:
        raise ReplayUsageError(
            f"more than one {what} topic: {_listing(topics, candidates)}; choose one with {flag} TOPIC"
            + (f" (or {flag} none)" if what != "odometry" else "")
        )
    notes.append(f"{what}: {candidates[0]} (the only {' / '.join(types)} topic)")
    return candidates[0]


def _camera_info_for(image_topic: str, infos: Sequence[str]) -> str | None:
    """The image_transport convention: ``<ns>/image_raw[/compressed]`` → ``<ns>/camera_info``."""
    base = image_topic
    for suffix in ("/compressed",):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    parent = base.rsplit("/", 1)[0]
    candidate = f"{parent}/camera_info"
    return candidate if candidate in infos else None


def select_topics(topics: Mapping[str, Any], request: TopicRequest, num_cameras: int) -> TopicMap:
    """Map bag topics (name → :class:`~wam_diff2_ros.bag.TopicInfo`) to the runtime's inputs.

    Raises :class:`ReplayUsageError` for unknown or mistyped topics and for ambiguous choices.
    """
    notes: list[str] = []
    image_types = (IMAGE_TYPE, COMPRESSED_TYPE)
    if request.image_topics:
        image_topics = list(request.image_topics)
        for topic in image_topics:
            _check_topic(topics, topic, "--image-topic", image_types)
        if len(set(image_topics)) != len(image_topics):
            raise ReplayUsageError(f"--image-topic: a topic is given twice: {image_topics}")
    else:
        candidates = [c for c in _by_type(topics, *image_types) if not c.endswith("/compressedDepth")]
        if not candidates:
            raise ReplayUsageError(
                "the bag has no sensor_msgs/Image or sensor_msgs/CompressedImage topic; topics: "
                + (_listing(topics, list(topics)) or "none")
            )
        if len(candidates) > 1:
            raise ReplayUsageError(
                f"the bag has {len(candidates)} image topics: {_listing(topics, candidates)}; name the camera(s) "
                "with --image-topic TOPIC (repeat it per camera, front camera first)"
            )
        image_topics = candidates
        notes.append(f"camera: {candidates[0]} (the only image topic)")
    if len(image_topics) != num_cameras:
        raise ReplayUsageError(
            f"{len(image_topics)} image topic(s) {image_topics} but the parameters configure {num_cameras} "
            f"camera(s) (cameras.names); for several cameras set cameras.names and a prompt.template with one "
            "<image> per camera (--set or --params), and give one --image-topic per camera in that order"
        )
    images = [(t, "compressed" if topics[t].msgtype == COMPRESSED_TYPE else "raw") for t in image_topics]

    all_infos = _by_type(topics, CAMERA_INFO_TYPE)
    infos: list[str | None]
    if request.camera_info_topics:
        if len(request.camera_info_topics) != len(image_topics):
            raise ReplayUsageError(
                f"--camera-info-topic given {len(request.camera_info_topics)} time(s) for {len(image_topics)} "
                "camera(s); give one per camera (none for a camera without one)"
            )
        infos = []
        for topic in request.camera_info_topics:
            if _is_off(topic):
                infos.append(None)
            else:
                _check_topic(topics, topic, "--camera-info-topic", (CAMERA_INFO_TYPE,))
                infos.append(topic)
    else:
        infos = [_camera_info_for(t, all_infos) for t in image_topics]
        if len(image_topics) == 1 and infos[0] is None and len(all_infos) == 1:
            infos = [all_infos[0]]
        for (topic, _), info in zip(images, infos, strict=True):
            notes.append(
                f"camera info for {topic}: {info}"
                if info
                else f"camera info for {topic}: none (the debug image uses the fallback pinhole)"
            )

    odometry = _single(topics, request.odometry_topic, "--odometry-topic", (ODOMETRY_TYPE,), "odometry", notes)
    command = _single(
        topics,
        request.command_topic,
        "--command-topic",
        (STRING_TYPE,),
        "command",
        notes,
        prefer=lambda name: "command" in name.lower() or "cmd" in name.lower(),
    )
    driving_notes: list[str] = []
    driving = _single(
        topics,
        request.driving_command_topic,
        "--driving-command-topic",
        (DRIVING_COMMAND_TYPE,),
        "driving command",
        driving_notes,
    )
    if driving is not None or request.driving_command_topic is not None:
        notes += driving_notes
    if command is None and driving is None:
        notes.append("command: none; plans need one (or command.default, e.g. --set command.default=straight)")
    acceleration = _single(
        topics, request.acceleration_topic, "--acceleration-topic", (ACCELERATION_TYPE,), "acceleration", notes
    )
    return TopicMap(images, infos, odometry, command, driving, acceleration, notes)


# --------------------------------------------------------------------------------------------
# Options and configuration


@dataclass
class ReplayOptions:
    """Everything the command line says (see :func:`build_parser`)."""

    bag: Path
    out: Path
    model: str | None = None
    params: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    topics: TopicRequest = field(default_factory=TopicRequest)
    rate_hz: float | None = None
    device: str | None = None
    dtype: str | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    max_plans: int | None = None
    detect: bool = False
    copy_inputs: bool = True
    plots: bool = True
    overwrite: bool = False
    progress: bool | None = None  # None: a bar when stderr is a terminal, else periodic lines


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` strings → parameters. Values of text parameters are taken as written (a prompt template may
    hold ``: ``); the others are YAML (``0.5``, ``true``, ``[front, left]``)."""
    import yaml

    from wam_diff2_ros.ros.params import SPEC_BY_NAME

    values: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ReplayUsageError(f"--set {item!r}: expected key=value, e.g. --set decoding.max_new_tokens=64")
        if key not in SPEC_BY_NAME and key not in REPLAY_KEYS and key != "use_sim_time":
            close = [n for n in SPEC_BY_NAME if n.split(".")[-1] == key.split(".")[-1]]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ReplayUsageError(f"--set {key}: unknown parameter{hint}; see config/wam_diff2.yaml")
        spec = SPEC_BY_NAME.get(key)
        if (spec is not None and isinstance(spec.default, str)) or (key in REPLAY_KEYS and key.endswith("_topic")):
            values[key] = text
            continue
        try:
            values[key] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            raise ReplayUsageError(f"--set {item!r}: the value is not valid YAML ({exc})") from None
        if values[key] is None:  # `key=null`
            values[key] = ""
    return values


def _model_path(model: str | None, from_params: str) -> tuple[str, str]:
    """(checkpoint directory, how it was chosen)."""
    if model is None or not model.strip():
        if from_params.strip():
            return from_params.strip(), "model.path from the parameters"
        raise ReplayUsageError(
            "no model: pass --model PATH (a checkpoint directory, e.g. checkpoints/WAM-Diff2-B32-2B) or --model demo"
        )
    from wam_diff2_ros.demo.resolve import ModelSpecError, is_model_name, resolve_model

    if is_model_name(model):
        name = model.strip().lower()
        try:
            return str(resolve_model(name)), f"the package's {name} model"
        except ModelSpecError as exc:  # missing or corrupt demo files
            raise ReplayModelError(f"--model {name}: the {name} model is not available: {exc}") from None
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ReplayUsageError(f"--model {model}: not a directory (expected a checkpoint directory or 'demo')")
    return str(path.resolve()), "--model"


def _resolve_dtype(options: ReplayOptions, values: Mapping[str, Any], device: str, from_set: bool) -> str:
    if options.dtype:
        return options.dtype
    if from_set:
        return str(values["model.dtype"])
    from wam_diff2_ros.core.checkpoint import resolve_device

    try:
        resolved = resolve_device(device)
    except (RuntimeError, ValueError) as exc:
        raise ReplayUsageError(f"model.device: {exc}") from None
    return "float32" if resolved.type == "cpu" else str(values["model.dtype"])


def _read_params(options: ReplayOptions) -> tuple[dict[str, Any], TopicRequest]:
    from wam_diff2_ros.ros.params import ParameterError, load_parameters_file

    values: dict[str, Any] = {}
    if options.params is not None:
        if not options.params.is_file():
            raise ReplayUsageError(f"--params {options.params}: no such file")
        try:
            values = load_parameters_file(options.params)
        except (ParameterError, OSError) as exc:
            raise ReplayUsageError(f"--params {options.params}: {exc}") from None
        except Exception as exc:  # YAML syntax
            raise ReplayUsageError(f"--params {options.params}: cannot read it ({exc})") from None
    values.update(options.overrides)
    request = TopicRequest()
    for key in [k for k in values if k.startswith("replay.")]:
        value = values.pop(key)
        if key not in REPLAY_KEYS:
            raise ReplayUsageError(f"parameter {key}: unknown (replay keys: {', '.join(REPLAY_KEYS)})")
        name = REPLAY_KEYS[key]
        if value is None:  # `key: null` = not set
            continue
        if name.endswith("_topics"):
            value = [value] if isinstance(value, str) else value
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ReplayUsageError(f"parameter {key}: expected a list of topic names, got {value!r}")
            value = list(value) or None
        elif not isinstance(value, str):
            raise ReplayUsageError(f"parameter {key}: expected a topic name, got {value!r}")
        setattr(request, name, value)
    values.pop("use_sim_time", None)
    return values, request


def build_config(
    options: ReplayOptions, values: Mapping[str, Any], topic_map: TopicMap | None, notes: list[str] | None = None
) -> Any:
    """The :class:`~wam_diff2_ros.ros.params.NodeConfig` for this replay (raises :class:`ReplayUsageError`).

    Precedence: flags (``--model``, ``--device``, ``--dtype``, ``--rate-hz``, the image topics' transports) over
    ``--set`` over ``--params`` over the node's defaults. Without ``--dtype`` / ``--set model.dtype`` the dtype is
    float32 on CPU (bf16 has no CPU units), else ``model.dtype``. (A checkpoint's own image processor limits, such
    as the demo model's, apply after ``model.min_pixels`` / ``model.max_pixels``, as in the node.)
    """
    from wam_diff2_ros.ros.params import SPEC_BY_NAME, NodeConfig, ParameterError

    merged = {s.name: s.default for s in SPEC_BY_NAME.values()}
    merged.update(values)
    model_path, _how = _model_path(options.model, str(merged.get("model.path") or ""))
    merged["model.path"] = model_path
    if options.device:
        merged["model.device"] = options.device
    merged["model.dtype"] = _resolve_dtype(
        options, merged, str(merged["model.device"]), "model.dtype" in options.overrides
    )
    if options.rate_hz is not None:
        merged["planning.rate_hz"] = float(options.rate_hz)
    if topic_map is not None:
        merged["cameras.transports"] = [transport for _, transport in topic_map.images]
    try:
        return NodeConfig.from_parameters(merged)
    except ParameterError as exc:
        raise ReplayUsageError(str(exc)) from None


def params_hash(values: Mapping[str, Any]) -> str:
    """sha256 (16 hex) of the effective parameters without ``model.path`` (machine independent)."""
    relevant = {k: v for k, v in sorted(values.items()) if k != "model.path"}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Planning instants


class InstantSchedule:
    """When the node would plan (and detect), on the bag clock.

    ``rate_hz > 0``: at ``start + k / rate_hz`` (k ≥ 1), as a ROS timer created at ``start``. ``rate_hz == 0``:
    at the receive time of each front image (:meth:`front_image`). Detection likewise at ``detect_rate_hz``.
    An instant at time t runs once every message received at or before t has been fed.
    """

    def __init__(self, start_ns: int, rate_hz: float, detect_rate_hz: float = 0.0) -> None:
        self.start_ns = start_ns
        self.plan_period_ns = round(_NS / rate_hz) if rate_hz > 0 else 0
        self.detect_period_ns = round(_NS / detect_rate_hz) if detect_rate_hz > 0 else 0
        self._next_plan = start_ns + self.plan_period_ns if self.plan_period_ns else None
        self._next_detect = start_ns + self.detect_period_ns if self.detect_period_ns else None
        self._image_plan: int | None = None

    def front_image(self, receive_ns: int) -> None:
        """A front image arrived (planning rate 0: plan at its receive time)."""
        if not self.plan_period_ns and self._image_plan is None:
            self._image_plan = receive_ns

    def due(self, before_ns: int) -> Iterator[tuple[int, str]]:
        """``(t_ns, "plan"|"detect")`` for the instants earlier than ``before_ns``, in time order (planning first
        at equal times). Call it with a message's receive time before feeding that message, and with the last
        receive time + 1 at the end of the bag."""
        while True:
            plan_at = self._image_plan if self._image_plan is not None else self._next_plan
            options = ((plan_at, 0, "plan"), (self._next_detect, 1, "detect"))
            candidates = [(t, order, kind) for t, order, kind in options if t is not None]
            if not candidates:
                return
            t, _, kind = min(candidates)
            if t >= before_ns:
                return
            if kind == "detect":
                self._next_detect = t + self.detect_period_ns
            elif self._image_plan is not None:
                self._image_plan = None
            else:
                self._next_plan = t + self.plan_period_ns
            yield t, kind


# --------------------------------------------------------------------------------------------
# Records


def _timing_dict(timing: Any, wall_ms: float) -> dict[str, float]:
    return {
        "preprocess_ms": timing.preprocess_ms,
        "vision_ms": timing.vision_ms,
        "prefill_ms": timing.prefill_ms,
        "denoise_ms": timing.denoise_ms,
        "commit_ms": timing.commit_ms,
        "total_ms": timing.total_ms,
        "end_to_end_ms": timing.end_to_end_ms,
        "wall_ms": wall_ms,
    }


def plan_record(index: int, t_ns: int, bag_start_ns: int, cycle: Any, wall_ms: float) -> dict[str, Any]:
    """One ``predictions.jsonl`` line for a non-idle planning instant."""
    record: dict[str, Any] = {
        "instant": index,
        "t_ns": t_ns,
        "t_s": round((t_ns - bag_start_ns) / _NS, 9),
    }
    result = cycle.result
    if result is None:
        record.update(
            status="blocked",
            stamp_ns=None,
            valid=False,
            reason="; ".join(str(p) for p in cycle.problems),
            problems=[str(p) for p in cycle.problems],
            waypoints=None,
            timing={"wall_ms": wall_ms},
        )
        return record
    obs = result.observation
    record.update(
        status="planned",
        stamp_ns=result.stamp_ns,
        valid=bool(result.valid),
        reason=result.reason,
        problems=[],
        command=obs.command.value,
        command_source=obs.command_source,
        velocity=[float(obs.velocity[0]), float(obs.velocity[1])],
        acceleration=[float(obs.acceleration[0]), float(obs.acceleration[1])],
        acceleration_source=obs.acceleration_source,
        odometry_stamp_ns=obs.odometry_stamp_ns,
        image_stamps_ns=[f.stamp_ns for f in obs.frames],
        prompt=result.prompt,
        raw_text=result.raw_text,
        waypoints=[[float(w.x), float(w.y)] for w in result.waypoints] if result.valid else None,
        yaw=[float(w.yaw) for w in result.waypoints] if result.valid else None,
        steps_per_block=list(result.steps_per_block),
        finished=bool(result.finished),
        model=result.model,
        timing=_timing_dict(result.timing, wall_ms),
    )
    return record


def error_record(index: int, t_ns: int, bag_start_ns: int, exc: BaseException, wall_ms: float) -> dict[str, Any]:
    """A ``predictions.jsonl`` line for an instant where the engine raised."""
    message = f"{type(exc).__name__}: {exc}"
    return {
        "instant": index,
        "t_ns": t_ns,
        "t_s": round((t_ns - bag_start_ns) / _NS, 9),
        "status": "error",
        "stamp_ns": None,
        "valid": False,
        "reason": f"engine error: {message}",
        "problems": [f"engine error: {message}"],
        "waypoints": None,
        "timing": {"wall_ms": wall_ms},
    }


def detection_record(t_ns: int, bag_start_ns: int, cycle: Any, wall_ms: float) -> dict[str, Any]:
    """One ``detections.jsonl`` line."""
    record: dict[str, Any] = {"t_ns": t_ns, "t_s": round((t_ns - bag_start_ns) / _NS, 9)}
    result = cycle.result
    if result is None:
        record.update(status="blocked", problems=[str(p) for p in cycle.problems], timing={"wall_ms": wall_ms})
        return record
    record.update(
        status="detected",
        stamp_ns=result.stamp_ns,
        camera=result.camera,
        width=result.width,
        height=result.height,
        detections=[
            {"label": d.label, "box_px": [d.x_min, d.y_min, d.x_max, d.y_max], "score": d.score}
            for d in result.detections
        ],
        skipped=result.skipped,
        reason=result.reason,
        prompt=result.prompt,
        raw_text=result.raw_text,
        timing=_timing_dict(result.timing.with_end_to_end(cycle.end_to_end_ms), wall_ms),
    )
    return record


def _json_line(record: Mapping[str, Any]) -> str:
    from wam_diff2_ros.tools.evaluation import to_jsonable

    return json.dumps(to_jsonable(record), ensure_ascii=False, allow_nan=False)


# --------------------------------------------------------------------------------------------
# Progress


class _Progress:
    """A tqdm bar over bag seconds on a terminal; otherwise a line at every 10 % of the window (or nothing)."""

    def __init__(self, total_s: float | None, mode: bool | None, stream: TextIO) -> None:
        self.total_s = total_s
        self.stream = stream
        self.bar: Any = None
        self.shown_s = -1.0
        self.latest: tuple[float, int, int, int] | None = None
        self.last_decile = -1
        self.lines = False
        if mode is False:
            return
        if stream.isatty() or mode is True:
            from tqdm import tqdm

            total = round(total_s, 1) if total_s else None
            self.bar = tqdm(total=total, unit="s", file=stream, desc="replay", bar_format=None, dynamic_ncols=True)
        else:
            self.lines = True

    def update(self, done_s: float, planned: int, valid: int, blocked: int) -> None:
        """Bag seconds replayed so far and the plan counts."""
        if self.total_s is not None:
            done_s = min(done_s, self.total_s)
        done_s = max(0.0, done_s)
        self.latest = (done_s, planned, valid, blocked)
        if done_s - self.shown_s < 0.099:
            return
        self.shown_s = done_s
        if self.bar is not None:
            self.bar.n = round(done_s, 1)
            self.bar.set_postfix(planned=planned, valid=valid, blocked=blocked, refresh=False)
            self.bar.refresh()
        elif self.lines:
            # every 10 % of the window, or every 10 s of bag time when its length is unknown
            step = int(10 * done_s / self.total_s) if self.total_s else int(done_s // 10)
            if step > self.last_decile:
                self.last_decile = step
                total = f" / {self.total_s:.1f}" if self.total_s else ""
                print(
                    f"replay: {done_s:6.1f}{total} s of bag time, {planned} planned ({valid} valid), {blocked} blocked",
                    file=self.stream,
                    flush=True,
                )

    def close(self) -> None:
        """Show the last state and finish the bar."""
        if self.bar is not None:
            if self.latest is not None:
                self.shown_s = -1.0
                self.update(*self.latest)
            self.bar.close()


# --------------------------------------------------------------------------------------------
# The replay


@dataclass
class ReplayResult:
    """What a replay produced (paths, counts, metrics) and its exit code."""

    exit_code: int
    out_dir: Path
    bag_path: Path | None = None
    predictions_path: Path | None = None
    metrics_path: Path | None = None
    summary_path: Path | None = None
    plots: list[Path] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    error: str | None = None


class _NoTrack:
    """Stands in for an :class:`EgoTrack` when the bag has no usable odometry: no ground truth anywhere."""

    def future_in_ego_frame(self, t_ns: int, horizons_s: Sequence[float] = ()) -> None:
        return None


def _prepare_out_dir(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ReplayUsageError(f"--out {out}: exists and is not a directory")
    existing = [name for name in OUTPUT_NAMES if (out / name).exists()]
    if existing and not overwrite:
        raise ReplayUsageError(
            f"--out {out}: already holds replay outputs ({', '.join(existing)}); pass --overwrite to replace them"
        )
    for name in existing:  # only the replay's own outputs; anything else in the folder stays
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    out.mkdir(parents=True, exist_ok=True)


@dataclass
class _Run:
    """Mutable state of one replay."""

    log: Callable[[str], None]
    bag_start_ns: int | None = None
    last_stamp_ns: int | None = None
    messages_read: int = 0
    messages_fed: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    decode_errors: int = 0
    first_decode_error: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    num_planned: int = 0
    num_valid: int = 0
    detections: int = 0
    odometry: list[tuple[int, float, float, float]] = field(default_factory=list)
    engine_errors: int = 0
    consecutive_errors: int = 0
    bag_error: str | None = None
    fatal: str | None = None
    interrupted: bool = False

    @property
    def num_blocked(self) -> int:
        return len(self.records) - self.num_planned


def _odometry_row(msg: Any) -> tuple[int, float, float, float] | None:
    """``(header stamp ns, x, y, yaw)`` of an Odometry message; None when unusable."""
    try:
        stamp = int(msg.header.stamp.sec) * _NS + int(msg.header.stamp.nanosec)
        pose = msg.pose.pose
        q = pose.orientation
        yaw = math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
        row = (stamp, float(pose.position.x), float(pose.position.y), yaw)
    except (AttributeError, TypeError, ValueError):
        return None
    return row if stamp > 0 and all(math.isfinite(v) for v in row[1:]) else None


def _bag_duration_s(bag: Path) -> float | None:
    """The duration from a bag folder's ``metadata.yaml`` (None for a bare storage file)."""
    import yaml

    folder = bag.parent if bag.name == "metadata.yaml" else bag
    try:
        info = yaml.safe_load((folder / "metadata.yaml").read_text(encoding="utf-8"))["rosbag2_bagfile_information"]
        return int(info["duration"]["nanoseconds"]) / _NS
    except Exception:
        return None


def replay(
    options: ReplayOptions,
    engine_factory: Callable[[Any], Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> ReplayResult:
    """Run the replay described by ``options`` (see the module docstring); ``engine_factory`` builds the engine
    from the :class:`NodeConfig` (default: the node's :func:`~wam_diff2_ros.ros.node.load_engine`).

    Usage problems raise :class:`ReplayUsageError`, an unloadable model :class:`ReplayModelError`; once the
    outputs are opened every ending (damaged bag, failing model, Ctrl-C) writes them and returns a
    :class:`ReplayResult` with the exit code.
    """
    from wam_diff2_ros.bag import BagError, BagReader

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    wall_start = time.perf_counter()
    if options.start_s < 0 or not math.isfinite(options.start_s):
        raise ReplayUsageError("--start must be a number >= 0")
    if options.duration_s is not None and not (math.isfinite(options.duration_s) and options.duration_s > 0):
        raise ReplayUsageError("--duration must be > 0")
    if options.max_plans is not None and options.max_plans < 1:
        raise ReplayUsageError("--max-plans must be >= 1")
    if options.rate_hz is not None and not (math.isfinite(options.rate_hz) and options.rate_hz >= 0):
        raise ReplayUsageError("--rate-hz must be >= 0 (0 = plan on each new front image)")
    values, yaml_request = _read_params(options)
    try:
        reader = BagReader(options.bag)
    except BagError as exc:
        raise ReplayUsageError(f"cannot open the bag: {exc}") from None
    try:
        request = options.topics.merged(yaml_request)
        names = values.get("cameras.names", ["front"])
        num_cameras = 1 if isinstance(names, str) else max(1, len(names)) if isinstance(names, list) else 1
        topic_map = select_topics(reader.topics, request, num_cameras)
        config_notes: list[str] = []
        config = build_config(options, values, topic_map, config_notes)
        for note in config_notes:
            log(f"model: {note}")
        if reader.damaged:
            log(f"warning: {reader.damaged}; replaying what can be read")
        for note in topic_map.notes:
            log(f"topics: {note}")
        if options.detect and config.detection_rate_hz <= 0:
            log("detection: --detect with detection.rate_hz 0: detecting at 1 Hz")
        elif not options.detect and config.detection_rate_hz > 0:
            log(f"detection: detection.rate_hz is {config.detection_rate_hz:g}; pass --detect to replay detection too")
        _prepare_out_dir(options.out, options.overwrite)
        if engine_factory is None:
            from wam_diff2_ros.ros.node import load_engine

            engine_factory = load_engine
        log(f"model: loading {config.model_path} (device {config.device}, {config.dtype})")
        loaded = time.perf_counter()
        try:
            engine = engine_factory(config)
        except Exception as exc:
            raise ReplayModelError(
                f"cannot load the model from {config.model_path}: {type(exc).__name__}: {exc}"
            ) from None
        load_s = time.perf_counter() - loaded
        try:
            return _run_replay(options, reader, config, topic_map, engine, log, wall_start, load_s)
        finally:
            close = getattr(engine, "close", None)
            if callable(close):
                try:
                    close()
                except Exception as exc:
                    log(f"warning: closing the engine failed: {exc}")
    finally:
        reader.close()


class _Outputs:
    """The output bag, predictions.jsonl and detections.jsonl."""

    def __init__(self, out: Path, config: Any, runtime: Any, reader: Any, topic_map: TopicMap, options: Any) -> None:
        from nav_msgs.msg import Path as PathMsg
        from sensor_msgs.msg import Image
        from visualization_msgs.msg import MarkerArray

        from wam_diff2_ros.bag import BagWriter
        from wam_diff2_ros.ros import qos

        self.bag = BagWriter(
            out / BAG_DIR_NAME,
            compress=True,
            custom_data={"generator": "wam_diff2_ros.tools.replay", "source_bag": str(Path(reader.path).resolve())},
        )
        self.declared: set[str] = set()
        self.copied: set[str] = set()
        self.skipped_copies: list[str] = []
        try:
            self._declare("path", PathMsg, qos.output_qos())
            self._declare("markers", MarkerArray, qos.output_qos())
            if runtime.msgs is not None:
                self._declare("trajectory", runtime.msgs.PlannedTrajectory, qos.output_qos())
                if options.detect:
                    self._declare("detections", runtime.msgs.DetectionArray, qos.output_qos())
            if config.debug_image:
                self._declare("debug_image", Image, qos.debug_image_qos())
            if options.copy_inputs:
                for topic in [*topic_map.inputs(), *[t for t in TF_TOPICS if t in reader.topics]]:
                    info = reader.topics[topic]
                    try:
                        self.bag.add_topic(topic, info.msgtype, info.qos[0] if info.qos else None)
                        self.copied.add(topic)
                    except Exception as exc:  # no definition for an exotic type: the replay goes on without it
                        self.skipped_copies.append(f"{topic}: {exc}")
            self.predictions = (out / "predictions.jsonl").open("w", encoding="utf-8")
            self.detections = (out / "detections.jsonl").open("w", encoding="utf-8") if options.detect else None
        except BaseException:
            self.bag.close()
            raise

    def _declare(self, name: str, msgtype: Any, qos_profile: Any) -> None:
        self.bag.add_topic(OUTPUT_TOPICS[name], msgtype, qos_profile)
        self.declared.add(name)

    def write_output(self, name: str, msg: Any, t_ns: int) -> None:
        """One output message at bag time ``t_ns`` (skipped when None or the topic is not declared)."""
        if msg is not None and name in self.declared:
            self.bag.write(OUTPUT_TOPICS[name], msg, t_ns)

    def line(self, stream: TextIO | None, record: Mapping[str, Any]) -> None:
        """Append one JSON line and flush (a crash keeps every finished instant)."""
        if stream is not None:
            stream.write(_json_line(record) + "\n")
            stream.flush()

    def output_counts(self) -> dict[str, int]:
        """Messages written per output topic."""
        return {name: self.bag.counts.get(OUTPUT_TOPICS[name], 0) for name in sorted(self.declared)}

    def close(self) -> None:
        """Close the files and finish the bag (index, metadata.yaml)."""
        self.predictions.close()
        if self.detections is not None:
            self.detections.close()
        self.bag.close()


def _run_replay(
    options: ReplayOptions,
    reader: Any,
    config: Any,
    topic_map: TopicMap,
    engine: Any,
    log: Callable[[str], None],
    wall_start: float,
    load_s: float,
) -> ReplayResult:
    from rclpy.serialization import deserialize_message

    from wam_diff2_ros.bag import BagError, message_class
    from wam_diff2_ros.ros.runtime import PlannerRuntime

    run = _Run(log)
    clock = {"now": 0}
    runtime = PlannerRuntime(config, engine, clock=lambda: clock["now"])
    outputs = _Outputs(options.out, config, runtime, reader, topic_map, options)
    for problem in outputs.skipped_copies:
        log(f"warning: not copying {problem}")
    if runtime.msgs is None:
        log(f"warning: {runtime.msgs_problem}: no {OUTPUT_TOPICS['trajectory']} in the output bag")

    image_index = {topic: i for i, (topic, _) in enumerate(topic_map.images)}
    transports = dict(topic_map.images)
    info_index = {topic: i for i, topic in enumerate(topic_map.camera_infos) if topic}
    classes = {topic: message_class(reader.topics[topic].msgtype) for topic in topic_map.inputs()}
    unimportable = sorted(t for t, c in classes.items() if c is None)
    if unimportable:
        log(f"warning: cannot import the message types of {unimportable}; those topics are not replayed")
    horizon_ns = round((config.planning.num_waypoints * config.planning.waypoint_dt_s + GROUND_TRUTH_MARGIN_S) * _NS)
    history_ns = 2 * _NS  # the observation buffer's history: older images cannot matter
    bag_duration = _bag_duration_s(Path(reader.path))
    total_s = options.duration_s
    if total_s is None and bag_duration is not None:
        total_s = max(0.0, bag_duration - options.start_s)
    progress = _Progress(total_s, options.progress, sys.stderr)
    detect_rate = (config.detection_rate_hz or 1.0) if options.detect else 0.0
    schedule: InstantSchedule | None = None
    window_start = 0
    window_end: int | None = None
    planning_done = False
    tail_end = 0

    def run_instants(before_ns: int) -> bool:
        """Run the instants due before ``before_ns``; False once planning is over."""
        assert schedule is not None
        for t_ns, kind in schedule.due(before_ns):
            if window_end is not None and t_ns > window_end:
                return False
            if kind == "plan":
                _plan_instant(run, runtime, outputs, t_ns, clock)
                if run.fatal or (options.max_plans is not None and len(run.records) >= options.max_plans):
                    return False
            else:
                _detect_instant(run, runtime, outputs, t_ns, clock)
        return True

    try:
        try:
            for topic, _, stamp_ns, data in reader.raw_messages(set(topic_map.inputs()) | outputs.copied):
                run.messages_read += 1
                if schedule is None:
                    run.bag_start_ns = stamp_ns
                    window_start = stamp_ns + round(options.start_s * _NS)
                    if options.duration_s is not None:
                        window_end = window_start + round(options.duration_s * _NS)
                    schedule = InstantSchedule(window_start, config.rate_hz, detect_rate)
                run.last_stamp_ns = stamp_ns
                if not planning_done:
                    planning_done = not run_instants(stamp_ns) or (window_end is not None and stamp_ns > window_end)
                    tail_end = stamp_ns + horizon_ns  # odometry for the last plans' ground truth
                if planning_done:
                    if stamp_ns > tail_end:
                        break
                    if topic != topic_map.odometry or classes.get(topic) is None:
                        continue
                cls = classes.get(topic)
                if cls is None or (topic in image_index and stamp_ns < window_start - history_ns):
                    continue
                try:
                    msg = deserialize_message(data, cls)
                except Exception as exc:
                    run.decode_errors += 1
                    run.first_decode_error = run.first_decode_error or f"{topic} at {stamp_ns} ns: {exc}"
                    continue
                if topic == topic_map.odometry:
                    row = _odometry_row(msg)
                    if row is not None:
                        run.odometry.append(row)
                if planning_done:
                    continue
                if topic in outputs.copied and stamp_ns >= window_start:
                    outputs.bag.write(topic, data, stamp_ns)
                clock["now"] = stamp_ns
                problem = _feed(runtime, topic_map, image_index, transports, info_index, topic, msg, stamp_ns)
                run.messages_fed[topic] += 1
                if problem is not None:
                    run.dropped[str(problem)] += 1
                elif image_index.get(topic) == 0 and stamp_ns >= window_start:
                    schedule.front_image(stamp_ns)
                progress.update((stamp_ns - window_start) / _NS, run.num_planned, run.num_valid, run.num_blocked)
        except BagError as exc:
            run.bag_error = str(exc)
        if not planning_done and schedule is not None and run.last_stamp_ns is not None:
            run_instants(run.last_stamp_ns + 1)  # what is due at the last message
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        if progress.latest is not None:
            progress.latest = (progress.latest[0], run.num_planned, run.num_valid, run.num_blocked)
        progress.close()
        outputs.close()
    if run.decode_errors:
        problem = f"{run.decode_errors} message(s) did not deserialise (first: {run.first_decode_error})"
        run.bag_error = f"{run.bag_error} | {problem}" if run.bag_error else f"bag {reader.path}: {problem}"

    if run.interrupted:
        exit_code = EXIT_INTERRUPTED
    elif run.fatal:
        exit_code = EXIT_FAILED
    elif run.bag_error:
        exit_code = EXIT_BAG_DAMAGED
    elif run.num_planned == 0:
        exit_code = EXIT_NO_PLANS
    else:
        exit_code = EXIT_OK
    return _finish(run, options, reader, config, topic_map, engine, wall_start, load_s, outputs, exit_code)


def _feed(
    runtime: Any,
    topic_map: TopicMap,
    image_index: Mapping[str, int],
    transports: Mapping[str, str],
    info_index: Mapping[str, int],
    topic: str,
    msg: Any,
    stamp_ns: int,
) -> Any:
    """Hand one bag message to the runtime's matching input, as the node's subscription callbacks do."""
    if topic in image_index:
        if transports[topic] == "compressed":
            return runtime.on_compressed_image(image_index[topic], msg, stamp_ns)
        return runtime.on_image(image_index[topic], msg, stamp_ns)
    if topic in info_index:
        return runtime.on_camera_info(info_index[topic], msg, stamp_ns)
    if topic == topic_map.odometry:
        return runtime.on_odometry(msg, stamp_ns)
    if topic == topic_map.acceleration:
        return runtime.on_acceleration(msg, stamp_ns)
    if topic == topic_map.command:
        return runtime.on_command(msg, stamp_ns)
    if topic == topic_map.driving_command:
        return runtime.on_driving_command(msg, stamp_ns)
    return None


def _plan_instant(run: _Run, runtime: Any, outputs: _Outputs, t_ns: int, clock: dict[str, int]) -> None:
    clock["now"] = t_ns
    started = time.perf_counter()
    try:
        cycle = runtime.plan(t_ns)
    except Exception as exc:  # the engine failed: the node reports it and keeps going
        wall_ms = (time.perf_counter() - started) * 1000.0
        run.engine_errors += 1
        run.consecutive_errors += 1
        record = error_record(len(run.records), t_ns, run.bag_start_ns or 0, exc, wall_ms)
        with INTERRUPTS.held():
            run.records.append(record)
            outputs.line(outputs.predictions, record)
        run.log(f"error: planning at t={record['t_s']:.2f} s failed: {record['reason']}")
        if run.consecutive_errors >= MAX_CONSECUTIVE_ENGINE_ERRORS:
            run.fatal = f"the model failed {run.consecutive_errors} times in a row (last: {record['reason']})"
        return
    wall_ms = (time.perf_counter() - started) * 1000.0
    if cycle.idle:
        return
    run.consecutive_errors = 0
    record = plan_record(len(run.records), t_ns, run.bag_start_ns or 0, cycle, wall_ms)
    with INTERRUPTS.held():  # the bag and predictions.jsonl get this instant together or not at all
        if cycle.result is not None:
            run.num_planned += 1
            run.num_valid += int(bool(cycle.result.valid))
            outputs.write_output("path", cycle.path, t_ns)
            outputs.write_output("trajectory", cycle.trajectory, t_ns)
            outputs.write_output("markers", cycle.markers, t_ns)
            outputs.write_output("debug_image", cycle.debug_image, t_ns)
        run.records.append(record)
        outputs.line(outputs.predictions, record)


def _detect_instant(run: _Run, runtime: Any, outputs: _Outputs, t_ns: int, clock: dict[str, int]) -> None:
    clock["now"] = t_ns
    started = time.perf_counter()
    try:
        cycle = runtime.detect(t_ns)
    except Exception as exc:
        run.log(f"error: detection at {t_ns} ns failed: {type(exc).__name__}: {exc}")
        return
    wall_ms = (time.perf_counter() - started) * 1000.0
    with INTERRUPTS.held():
        if cycle.result is not None:
            run.detections += 1
            outputs.write_output("detections", cycle.detections, t_ns)
            outputs.write_output("markers", cycle.markers, t_ns)
            outputs.write_output("debug_image", cycle.debug_image, t_ns)
        outputs.line(outputs.detections, detection_record(t_ns, run.bag_start_ns or 0, cycle, wall_ms))


# --------------------------------------------------------------------------------------------
# Metrics, plots, summary


def _plan_records_for_metrics(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in records:
        if r["status"] != "planned":
            continue
        vx, vy = r["velocity"]
        rows.append(
            {
                "stamp_ns": r["stamp_ns"],
                "valid": r["valid"],
                "waypoints": r["waypoints"],
                "latency_s": r["timing"]["total_ms"] / 1000.0,
                "command": r["command"],
                "speed": math.hypot(vx, vy),
            }
        )
    return rows


def _finish(
    run: _Run,
    options: ReplayOptions,
    reader: Any,
    config: Any,
    topic_map: TopicMap,
    engine: Any,
    wall_start: float,
    load_s: float,
    outputs: _Outputs,
    exit_code: int,
) -> ReplayResult:
    from wam_diff2_ros.tools import evaluation

    out = options.out
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

    plan_rows = _plan_records_for_metrics(run.records)
    metrics = evaluation.compute_metrics(plan_rows, track if track is not None else _NoTrack())
    metrics["invalid_answer_reasons"] = dict(
        Counter(_reason_kind(r["reason"]) for r in run.records if r["status"] == "planned" and not r["valid"])
    )
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

    plots: list[Path] = []
    if options.plots and track is None:
        notes.append("plots skipped: no ground truth")
    elif options.plots:
        model_name = getattr(engine, "name", "?")
        horizon_ns = round(config.planning.num_waypoints * config.planning.waypoint_dt_s * _NS)
        # panels at instants whose whole future is in the bag (when there are any)
        full = [row for row in plan_rows if row["stamp_ns"] + horizon_ns <= track.end_ns]
        bev_rows = full or plan_rows
        drawings = (
            (
                "bev",
                lambda: evaluation.plot_bev(
                    bev_rows,
                    track,
                    out / "plots" / "bev.png",
                    title=f"{model_name} on {Path(reader.path).name}: predicted vs actual future (ego frame)",
                ),
            ),
            (
                "error over horizon",
                lambda: evaluation.plot_error_over_horizon(
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

    metrics.update(
        {
            "planning_instants": len(run.records),
            "num_blocked": len(blocked),
            "blocked_reasons": dict(blocked_reasons.most_common()),
            "blocked_inputs": dict(blocked_inputs.most_common()),
            "num_engine_errors": run.engine_errors,
            "dropped_messages": dict(run.dropped.most_common()),
            "ground_truth": ground_truth,
            "complete": exit_code in (EXIT_OK, EXIT_NO_PLANS),
            "bag_error": run.bag_error,
            "exit_code": exit_code,
            "notes": notes,
            "run": {
                "tool": "wam-diff2-replay",
                "bag": str(Path(reader.path).resolve()),
                "topics": topic_map.as_dict(),
                "model": str(getattr(engine, "name", "?")),
                "model_path": config.model_path,
                "device": str(getattr(engine, "device", config.device)),
                "dtype": str(getattr(engine, "dtype", config.dtype)).replace("torch.", ""),
                "params_file": str(options.params) if options.params else None,
                "overrides": dict(options.overrides),
                "params_hash": params_hash(config.values),
                "pixel_limits": [config.min_pixels, config.max_pixels],
                "planning_rate_hz": config.rate_hz,
                "start_s": options.start_s,
                "duration_s": options.duration_s,
                "max_plans": options.max_plans,
                "bag_start_ns": run.bag_start_ns,
                "last_message_ns": run.last_stamp_ns,
                "messages_read": run.messages_read,
                "messages_fed": dict(sorted(run.messages_fed.items())),
                "detections": run.detections if options.detect else None,
                "output_messages": outputs.output_counts(),
                "instants": len(run.records),
                "model_load_s": load_s,
                "wall_time_s": time.perf_counter() - wall_start,
            },
        }
    )
    metrics_path = evaluation.write_metrics_json(metrics, out / "metrics.json")
    summary = _summary_text(topic_map, metrics, plots, out)
    summary_path = out / "summary.txt"
    summary_path.write_text(summary, encoding="utf-8")
    error = None
    if exit_code == EXIT_BAG_DAMAGED:
        error = f"{run.bag_error}; replayed until t={_rel(run.last_stamp_ns, run.bag_start_ns)}"
    elif exit_code == EXIT_FAILED:
        error = run.fatal
    elif exit_code == EXIT_NO_PLANS:
        error = notes[0]
    elif exit_code == EXIT_INTERRUPTED:
        error = f"interrupted at t={_rel(run.last_stamp_ns, run.bag_start_ns)}"
    return ReplayResult(
        exit_code=exit_code,
        out_dir=out,
        bag_path=out / BAG_DIR_NAME,
        predictions_path=out / "predictions.jsonl",
        metrics_path=metrics_path,
        summary_path=summary_path,
        plots=plots,
        metrics=metrics,
        summary=summary,
        error=error,
    )


def _reason_kind(reason: str) -> str:
    """A parse failure reason without its particulars (quoted text, numbers), for counting."""
    import re

    text = re.sub(r"'[^']*'", "'…'", reason)
    return re.sub(r"[-+±]?\d+(\.\d+)?", "N", text)


def _rel(stamp_ns: int | None, start_ns: int | None) -> str:
    if stamp_ns is None or start_ns is None:
        return "?"
    return f"{(stamp_ns - start_ns) / _NS:.2f} s (bag time {stamp_ns} ns)"


def _fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


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
            f"{h} {_fmt(metrics.get(f'ade_{h}'))}/{_fmt(metrics.get(f'fde_{h}'))} m (n={metrics.get(f'count_{h}')})"
            for h in ("1s", "2s", "3s", "4s")
        ),
    ]
    by_command = metrics.get("by_command") or {}
    if len(by_command) > 1:
        lines.append(
            "by command: "
            + ", ".join(
                f"{name} ADE/FDE@4s {_fmt(group.get('ade_4s'))}/{_fmt(group.get('fde_4s'))} m (n={group['count']})"
                for name, group in by_command.items()
            )
        )
    latency = metrics["latency_ms"]
    lines.append(
        f"latency:    model p50 {_fmt(latency['p50'], ' ms', 0)}, p95 {_fmt(latency['p95'], ' ms', 0)}, "
        f"max {_fmt(latency['max'], ' ms', 0)} (n={latency['count']})"
    )
    if metrics["invalid_answer_reasons"]:
        top = sorted(metrics["invalid_answer_reasons"].items(), key=lambda item: -item[1])[:2]
        lines.append("invalid:    " + "; ".join(f"{reason} ({count}x)" for reason, count in top))
    if metrics["blocked_reasons"]:
        top = list(metrics["blocked_reasons"].items())[:3]
        lines.append("blocked:    " + "; ".join(f"{reason} ({count}x)" for reason, count in top))
    lines.append(f"time:       {info['wall_time_s']:.1f} s wall (model load {info['model_load_s']:.1f} s)")
    counts = ", ".join(f"{name} {count}" for name, count in info["output_messages"].items())
    lines += [
        f"output bag: {out / BAG_DIR_NAME}  ({counts}); play it: ros2 bag play {out / BAG_DIR_NAME}",
        f"results:    {out / 'predictions.jsonl'}, {out / 'metrics.json'}",
    ]
    if plots:
        lines.append("plots:      " + ", ".join(str(p) for p in plots))
    lines += [f"note:       {note}" for note in metrics["notes"]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Command line


class _Parser(argparse.ArgumentParser):
    """argparse with one clear line on errors (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``wam-diff2-replay`` argument parser."""
    parser = _Parser(
        prog="wam-diff2-replay",
        description="Replay a rosbag2 bag (MCAP or sqlite3) through the WAM-Diff2 node's planning path offline "
        "and evaluate the plans against the ego's actual future from the bag's odometry.",
        epilog="Exit codes: 0 done; 1 model failed; 2 usage / parameters / topics / unreadable bag; 3 bag damaged "
        "or truncated (the readable part was replayed and written); 4 nothing could be planned; 130 interrupted "
        "(Ctrl-C, SIGTERM; outputs so far written).",
    )
    parser.add_argument("bag", type=Path, help="bag folder, metadata.yaml, .mcap or .db3 file")
    parser.add_argument("--out", type=Path, required=True, help="output folder (bag, predictions, metrics, plots)")
    parser.add_argument("--model", help="checkpoint directory, or 'demo' (default: model.path of --params)")
    parser.add_argument("--params", type=Path, help="the node's parameters YAML (e.g. config/wam_diff2.yaml)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a parameter (repeatable)"
    )
    topics = parser.add_argument_group("topics (default: chosen by message type when unambiguous)")
    topics.add_argument("--image-topic", action="append", metavar="TOPIC", help="camera topic, repeat per camera")
    topics.add_argument("--camera-info-topic", action="append", metavar="TOPIC", help="per camera, or none")
    topics.add_argument("--odometry-topic", metavar="TOPIC", help="nav_msgs/Odometry (or none)")
    topics.add_argument("--command-topic", metavar="TOPIC", help="std_msgs/String command (or none)")
    topics.add_argument("--driving-command-topic", metavar="TOPIC", help="wam_diff2_ros/DrivingCommand (or none)")
    topics.add_argument("--acceleration-topic", metavar="TOPIC", help="AccelWithCovarianceStamped (or none)")
    run = parser.add_argument_group("run")
    run.add_argument("--rate-hz", type=float, help="planning rate on the bag clock; 0 = each new front image")
    run.add_argument("--device", help="auto, cpu, cuda, cuda:N, npu, npu:N (default: model.device)")
    run.add_argument(
        "--dtype",
        choices=("bfloat16", "float16", "float32"),
        help="weight dtype (default: float32 on CPU, else model.dtype)",
    )
    run.add_argument("--start", type=float, default=0.0, metavar="S", help="skip the first S seconds")
    run.add_argument("--duration", type=float, metavar="D", help="replay only D seconds")
    run.add_argument("--max-plans", type=int, metavar="N", help="stop after N planning instants")
    run.add_argument("--detect", action="store_true", help="also run detection (detection.rate_hz, or 1 Hz)")
    run.add_argument(
        "--copy-inputs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="copy the input topics (and /tf) into the output bag (default: yes)",
    )
    run.add_argument("--no-plots", action="store_true", help="do not draw the PNG plots")
    run.add_argument("--overwrite", action="store_true", help="replace earlier replay outputs in --out")
    run.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    return parser


def options_from_args(args: argparse.Namespace) -> ReplayOptions:
    """:class:`ReplayOptions` from parsed arguments (raises :class:`ReplayUsageError`)."""
    if not args.bag.exists():
        raise ReplayUsageError(f"bag {args.bag}: no such file or folder")
    return ReplayOptions(
        bag=args.bag,
        out=args.out,
        model=args.model,
        params=args.params,
        overrides=parse_set(args.set),
        topics=TopicRequest(
            image_topics=args.image_topic,
            camera_info_topics=args.camera_info_topic,
            odometry_topic=args.odometry_topic,
            command_topic=args.command_topic,
            driving_command_topic=args.driving_command_topic,
            acceleration_topic=args.acceleration_topic,
        ),
        rate_hz=args.rate_hz,
        device=args.device,
        dtype=args.dtype,
        start_s=args.start,
        duration_s=args.duration,
        max_plans=args.max_plans,
        detect=args.detect,
        copy_inputs=args.copy_inputs,
        plots=not args.no_plots,
        overwrite=args.overwrite,
        progress=False if args.no_progress else None,
    )


class InterruptGate:
    """Ctrl-C / SIGTERM as ``KeyboardInterrupt``, held back while one instant's outputs are being written.

    With the gate installed (``install``, main thread only) a signal that arrives inside ``held()`` is raised
    when the block ends, so ``predictions.jsonl`` and the output bag always hold the same instants.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._pending: str | None = None

    def held(self) -> InterruptGate:
        """Context manager: a signal inside is raised at its end."""
        return self

    def __enter__(self) -> InterruptGate:
        self._depth += 1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._depth -= 1
        if self._depth == 0 and self._pending is not None and exc_type is None:
            reason, self._pending = self._pending, None
            raise KeyboardInterrupt(reason)

    def interrupt(self, signum: int, frame: Any) -> None:
        """The signal handler."""
        if self._depth > 0:
            self._pending = f"signal {signum}"
            return
        raise KeyboardInterrupt(f"signal {signum}")

    def install(self) -> dict[int, Any]:
        """Handle SIGINT and SIGTERM (``timeout``, a cancelled job) with the gate; returns the previous handlers."""
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return {}
        self._pending = None
        return {sig: signal.signal(sig, self.interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def restore(previous: Mapping[int, Any]) -> None:
        """Put the handlers ``install`` replaced back."""
        import signal

        for sig, handler in previous.items():
            signal.signal(sig, handler)


INTERRUPTS = InterruptGate()


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``wam-diff2-replay`` (see the module docstring); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    prog = parser.prog
    previous = INTERRUPTS.install()
    try:
        options = options_from_args(args)
        result = replay(options)
    except ReplayUsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ReplayModelError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        INTERRUPTS.restore(previous)
    print(result.summary, end="")
    if result.error:
        print(f"{prog}: error: {result.error}", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
