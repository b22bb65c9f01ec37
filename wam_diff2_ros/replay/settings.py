"""The replay's settings: exit codes, errors, :class:`ReplayOptions`, ``--set`` parsing, the model and the
node configuration built from the parameters file and flags.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wam_diff2_ros.replay.errors import ReplayModelError, ReplayUsageError
from wam_diff2_ros.replay.topics import TopicMap, TopicRequest
from wam_diff2_ros.ros.inputs import INPUTS, InputSpec

#: ``replay.<role>_topic`` (``_topics`` per camera) → the input it names, one per row of the input table.
REPLAY_KEYS: dict[str, InputSpec] = {f"replay.{spec.request_key}": spec for spec in INPUTS}


MAX_CONSECUTIVE_ENGINE_ERRORS = 3
GROUND_TRUTH_MARGIN_S = 0.5


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
    serve_port: int | None = None  # --serve: the live Foxglove view on this port (0: any free port)
    serve_speed: float = 1.0  # --serve-speed: bag seconds per wall second; 0 = as fast as it goes


@dataclass(frozen=True)
class RunPlan:
    """How a run goes and what it writes, resolved once from :class:`ReplayOptions` (with the node's config and the
    topic map, the only things the replay passes on): the output folder and files, the bag window, the live view,
    and what ``metrics.json`` records of the settings."""

    out: Path
    detect: bool = False
    copy_inputs: bool = True
    plots: bool = True
    start_s: float = 0.0
    duration_s: float | None = None
    max_plans: int | None = None
    progress: bool | None = None
    serve_port: int | None = None
    serve_speed: float = 1.0
    params_file: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, options: ReplayOptions) -> RunPlan:
        """The plan of ``options`` (raises :class:`ReplayUsageError` for a window that cannot be)."""
        if options.start_s < 0 or not math.isfinite(options.start_s):
            raise ReplayUsageError("--start must be a number >= 0")
        if options.duration_s is not None and not (math.isfinite(options.duration_s) and options.duration_s > 0):
            raise ReplayUsageError("--duration must be > 0")
        if options.max_plans is not None and options.max_plans < 1:
            raise ReplayUsageError("--max-plans must be >= 1")
        return cls(
            out=options.out,
            detect=options.detect,
            copy_inputs=options.copy_inputs,
            plots=options.plots,
            start_s=options.start_s,
            duration_s=options.duration_s,
            max_plans=options.max_plans,
            progress=options.progress,
            serve_port=options.serve_port,
            serve_speed=options.serve_speed,
            params_file=str(options.params) if options.params else None,
            overrides=dict(options.overrides),
        )


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
        topic_key = REPLAY_KEYS.get(key)
        if (spec is not None and isinstance(spec.default, str)) or (topic_key is not None and not topic_key.per_camera):
            values[key] = text
            continue
        try:
            values[key] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            raise ReplayUsageError(f"--set {item!r}: the value is not valid YAML ({exc})") from None
        if values[key] is None:  # `key=null`
            values[key] = ""
    return values


def choose_model_path(model: str | None, from_params: str) -> tuple[str, str]:
    """(checkpoint directory, how it was chosen)."""
    if model is None or not model.strip():
        if from_params.strip():
            return from_params.strip(), "model.path from the parameters"
        raise ReplayUsageError(
            "no model: pass --model PATH (a checkpoint directory, e.g. checkpoints/WAM-Diff2-B32-2B) or --model demo"
        )
    from wam_diff2_ros.demo.resolve import ModelSpecError, model_directory

    try:
        path, how = model_directory(model)
    except ModelSpecError as exc:  # missing or corrupt demo files
        name = model.strip().lower()
        raise ReplayModelError(f"--model {name}: the {name} model is not available: {exc}") from None
    except NotADirectoryError:
        expected = "expected a checkpoint directory or 'demo'"
        raise ReplayUsageError(f"--model {model}: not a directory ({expected})") from None
    return str(path), how


def _resolve_dtype(options: ReplayOptions, values: Mapping[str, Any], device: str, from_set: bool) -> str:
    if options.dtype:
        return options.dtype
    if from_set:
        return str(values["model.dtype"])
    from wam_diff2_ros.core.checkpoint import default_dtype

    try:
        return default_dtype(device, str(values["model.dtype"]))
    except (RuntimeError, ValueError) as exc:
        raise ReplayUsageError(f"model.device: {exc}") from None


def read_params(options: ReplayOptions) -> tuple[dict[str, Any], TopicRequest]:
    """The node parameters of a replay (the --params file, then --set) and the topics they ask for."""
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
        input_spec = REPLAY_KEYS[key]
        if value is None:  # `key: null` = not set
            continue
        if input_spec.per_camera:
            value = [value] if isinstance(value, str) else value
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ReplayUsageError(f"parameter {key}: expected a list of topic names, got {value!r}")
            value = list(value) or None
        elif not isinstance(value, str):
            raise ReplayUsageError(f"parameter {key}: expected a topic name, got {value!r}")
        if value is not None:
            request.topics[input_spec.role] = value
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
    model_path, _how = choose_model_path(options.model, str(merged.get("model.path") or ""))
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
