"""The validated node configuration: :class:`NodeConfig`, read from parameter values through the value reader
(:class:`~.reader.ValueReader`, the camera section by :mod:`.cameras`); the rules that reading records
(:func:`parameter_rules`) and the problems of a set of values (:func:`validation_problems`, :func:`change_problems`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wam_diff2_ros.core.acceleration import ACCELERATION_SOURCES, AccelerationFilterConfig
from wam_diff2_ros.core.candidates import MAX_CANDIDATES
from wam_diff2_ros.core.device_preprocess import PREPROCESS_MODES
from wam_diff2_ros.core.engine.decoding import ENGINES, REMASKING_STRATEGIES, DecodeConfig, DecodeConfigError
from wam_diff2_ros.core.kinematics import DEFAULT_KINEMATIC_LIMITS, KinematicLimits
from wam_diff2_ros.core.observation import SyncConfig
from wam_diff2_ros.core.planning import PlanningConfig
from wam_diff2_ros.core.prompts import parse_navigation_command
from wam_diff2_ros.core.route_command import DEFAULT_LATERAL_THRESHOLD_M, DEFAULT_LOOKAHEAD_M
from wam_diff2_ros.core.trajectory_points import DEFAULT_WHEELBASE_M
from wam_diff2_ros.core.turn_signal import DEFAULT_HOLD_S
from wam_diff2_ros.demo.resolve import is_model_name

from ..schedule import Cadence
from .cameras import CameraConfig, camera_index, camera_list, planning_cameras, planning_template, read_cameras
from .reader import ParameterRule, ValueReader, kind_of
from .specs import (
    COMMAND_SOURCES,
    DEVICES_HINT,
    DTYPES,
    DURABILITIES,
    KINEMATICS_DESCRIPTIONS,
    PARAMETER_SPECS,
    QOS_INPUTS,
    RELIABILITIES,
    SPEC_BY_NAME,
    ParameterError,
)


@dataclass(frozen=True)
class QosSettings:
    """Subscription QoS of one input."""

    reliability: str
    depth: int
    durability: str


@dataclass(frozen=True)
class NodeConfig:
    """Validated node parameters (see :data:`~.specs.PARAMETER_SPECS` for the meaning of each)."""

    values: Mapping[str, Any] = field(repr=False)
    autostart: bool
    model_path: str
    device: str
    dtype: str
    min_pixels: int
    max_pixels: int
    preprocess: str
    cpu_threads: int  # 0 = automatic (ros/model_slot.py cpu_threads_for)
    unload_on_deactivate: bool
    warmup: bool
    warmup_image_size: tuple[int, int]
    decode: DecodeConfig
    template: str
    system: str | None
    cameras: tuple[CameraConfig, ...]
    planning_cameras: tuple[int, ...]  # indices into cameras: the planning prompt's images, front camera first
    fallback_hfov_deg: float
    rate_hz: float
    frame_id: str
    max_plan_age_s: float
    sync: SyncConfig
    qos: Mapping[str, QosSettings]
    acceleration_filter: AccelerationFilterConfig
    planning: PlanningConfig
    detection_rate_hz: float
    detection_camera: int
    detection_marker_depth_m: float
    vqa_enabled: bool
    vqa_cameras: tuple[int, ...]
    marker_lifetime_s: float
    detection_marker_lifetime_s: float
    diagnostics_period_s: float
    warn_throttle_s: float
    invalid_rate_window: int
    debug_image: bool
    debug_camera_pose: tuple[float, float, float, float, float, float] | None
    viewer_port: int = 0
    viewer_host: str = "127.0.0.1"
    command_source: str = "topic"  # topic | turn_indicators | route
    turn_signal_hold_s: float = DEFAULT_HOLD_S
    route_lookahead_m: float = DEFAULT_LOOKAHEAD_M
    route_lateral_threshold_m: float = DEFAULT_LATERAL_THRESHOLD_M
    autoware_outputs: bool = False
    wheelbase_m: float = DEFAULT_WHEELBASE_M

    @property
    def cadence(self) -> Cadence:
        """When to plan and detect (:mod:`.schedule`)."""
        return Cadence(self.rate_hz, self.detection_rate_hz)

    @property
    def camera_names(self) -> tuple[str, ...]:
        """Camera names in prompt order."""
        return tuple(c.name for c in self.cameras)

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any], require_model: bool = True) -> NodeConfig:
        """Validate ``values`` (parameter name → value; missing names take their defaults).

        Raises :class:`ParameterError` listing every problem. ``require_model=False`` accepts an empty
        ``model.path`` (tests of the parameter layer).
        """
        return _read(ValueReader(values), require_model)


def parameter_rules() -> dict[str, ParameterRule]:
    """Every parameter's :class:`ParameterRule`: validation runs once on the defaults and records what it
    checks, so a parameter added to :data:`PARAMETER_SPECS` and validated in :meth:`NodeConfig.from_parameters`
    gets its declaration's range without a second table. Parameters validation never reads get a rule of
    their default's kind."""
    if not _RULES:
        reader = ValueReader({})
        with contextlib.suppress(ParameterError):  # a default that does not validate: its test reports it
            _read(reader, require_model=False)
        for spec in PARAMETER_SPECS:
            _RULES[spec.name] = reader.rules.get(spec.name) or ParameterRule(kind_of(spec.default))
    return dict(_RULES)


_RULES: dict[str, ParameterRule] = {}


def validation_problems(values: Mapping[str, Any], require_model: bool = True) -> list[str]:
    """The problems :meth:`NodeConfig.from_parameters` reports for ``values`` (empty when they validate)."""
    try:
        NodeConfig.from_parameters(values, require_model=require_model)
    except ParameterError as exc:
        return [line.strip() for line in str(exc).splitlines()[1:]]
    return []


def change_problems(current: Mapping[str, Any], changes: Mapping[str, Any], require_model: bool = True) -> list[str]:
    """Problems that setting ``changes`` on top of ``current`` introduces (problems ``current`` already has,
    e.g. a bad override waiting for its fix, are not blamed on an unrelated change)."""
    before = set(validation_problems(current, require_model))
    return [p for p in validation_problems({**current, **changes}, require_model) if p not in before]


def _decode(reader: ValueReader) -> DecodeConfig:
    seed = reader.integer("decoding.seed", minimum=-1)
    before = len(reader.errors)
    try:
        return DecodeConfig(
            max_new_tokens=reader.integer("decoding.max_new_tokens", 1),
            block_size=reader.integer("decoding.block_size", 1),
            denoising_steps=reader.integer("decoding.denoising_steps", 1),
            temperature=reader.number("decoding.temperature", minimum=0.0),
            top_k=reader.integer("decoding.top_k", 0),
            top_p=reader.number("decoding.top_p", positive=True, maximum=1.0),
            remasking_strategy=reader.text("decoding.remasking_strategy", REMASKING_STRATEGIES),
            confidence_threshold=reader.number("decoding.confidence_threshold", positive=True, maximum=1.0),
            engine=reader.text("decoding.engine", ENGINES),
            cuda_graphs=reader.boolean("decoding.cuda_graphs"),
            deadline_ms=reader.number("decoding.deadline_ms", minimum=0.0),
            seed=None if seed < 0 else seed,
        )
    except DecodeConfigError as exc:
        reader.fail_section("decoding", str(exc), before)
        return DecodeConfig()


def _qos(reader: ValueReader) -> dict[str, QosSettings]:
    return {
        name: QosSettings(
            reliability=reader.text(f"qos.{name}.reliability", RELIABILITIES),
            depth=reader.integer(f"qos.{name}.depth", 1),
            durability=reader.text(f"qos.{name}.durability", DURABILITIES),
        )
        for name in QOS_INPUTS
    }


def _read(reader: ValueReader, require_model: bool) -> NodeConfig:
    """The values of ``reader`` validated into a :class:`NodeConfig`; :class:`ParameterError` lists every problem."""
    model_path = reader.text("model.path").strip()
    if require_model and not model_path:
        reader.fail("model.path", "is empty; set it to a checkpoint directory (-p model.path:=/path/to/ckpt)")
    elif model_path and not is_model_name(model_path) and not Path(model_path).expanduser().is_dir():
        reader.fail("model.path", f"{model_path!r} is not a directory")
    device = reader.text("model.device").strip()
    base = device.split(":", 1)[0]
    if base not in ("auto", "cpu", "cuda", "npu") or (":" in device and not device.split(":", 1)[1].isdigit()):
        reader.fail("model.device", f"expected {DEVICES_HINT}, got {device!r}")
    dtype = reader.text("model.dtype", DTYPES)
    before = len(reader.errors)
    min_pixels = reader.integer("model.min_pixels", 1)
    preprocess = reader.text("model.preprocess", PREPROCESS_MODES)
    max_pixels = reader.integer("model.max_pixels", 1)
    if max_pixels < min_pixels:
        reader.fail_section("model.max_pixels", f"{max_pixels} is smaller than model.min_pixels {min_pixels}", before)
    warmup_size = reader.numbers("model.warmup_image_size")
    if len(warmup_size) != 2 or not all(v >= 1 and v.is_integer() for v in warmup_size):
        reader.fail("model.warmup_image_size", f"needs [width, height] in whole pixels >= 1, got {warmup_size}")
        warmup_size = [float(v) for v in SPEC_BY_NAME["model.warmup_image_size"].default]
    decode = _decode(reader)
    cameras = read_cameras(reader)
    plan_cameras = planning_cameras(reader, cameras)
    template = planning_template(reader, cameras, plan_cameras)
    system_text = reader.text("prompt.system")
    rate_hz = reader.number("planning.rate_hz", minimum=0.0)
    frame_id = reader.text("planning.frame_id").strip()
    if not frame_id:
        reader.fail("planning.frame_id", "must not be empty")

    sync = SyncConfig()
    default_command_text = reader.text("command.default").strip()
    default_command = None
    if default_command_text:
        try:
            default_command = parse_navigation_command(default_command_text)
        except ValueError as exc:
            reader.fail("command.default", str(exc))
    before = len(reader.errors)
    try:
        sync = SyncConfig(
            max_skew_ms=reader.number("sync.max_skew_ms", positive=True),
            max_age_ms=reader.number("sync.max_age_ms", positive=True),
            max_image_age_ms=reader.number("sync.max_image_age_ms", positive=True),
            acceleration_source=reader.text("acceleration.source", ACCELERATION_SOURCES),
            command_max_age_s=reader.number("command.max_age_s", minimum=0.0),
            default_command=default_command,
        )
    except ValueError as exc:
        reader.fail_section("sync", str(exc), before)
    acceleration_filter = AccelerationFilterConfig()
    before = len(reader.errors)
    try:
        acceleration_filter = AccelerationFilterConfig(
            window_s=reader.number("acceleration.window_s", positive=True),
            min_samples=reader.integer("acceleration.min_samples", 2),
            min_span_s=reader.number("acceleration.min_span_s", positive=True),
            include_centripetal=reader.boolean("acceleration.include_centripetal"),
        )
    except ValueError as exc:
        reader.fail_section("acceleration", str(exc), before)

    kinematics = DEFAULT_KINEMATIC_LIMITS
    before = len(reader.errors)
    try:
        kinematics = KinematicLimits(
            **{
                name: (
                    reader.boolean(f"planning.kinematics.{name}")
                    if name == "allow_reverse"
                    else reader.number(f"planning.kinematics.{name}", minimum=0.0)
                    if name == "max_backward_m"
                    else reader.number(f"planning.kinematics.{name}", positive=True)
                )
                for name in KINEMATICS_DESCRIPTIONS
            }
        )
    except ValueError as exc:
        reader.fail_section("planning.kinematics", str(exc), before)
    planning = PlanningConfig()
    categories = tuple(c.strip() for c in reader.strings("detection.categories"))
    before = len(reader.errors)
    try:
        planning = PlanningConfig(
            template=template if not any(e.startswith("prompt.template") for e in reader.errors) else "navsim",
            system=system_text or None,
            decode=decode,
            num_waypoints=reader.integer("planning.num_waypoints", 1),
            waypoint_dt_s=reader.number("planning.waypoint_dt_s", positive=True),
            max_abs_coord_m=reader.number("planning.max_abs_coord_m", positive=True),
            max_step_m=reader.number("planning.max_step_m", positive=True),
            min_confidence=reader.number("planning.min_confidence", minimum=0.0, maximum=1.0),
            kinematics=kinematics,
            detection_categories=categories,
            detection_max_new_tokens=reader.integer("detection.max_new_tokens", 1),
            vqa_max_new_tokens=reader.integer("vqa.max_new_tokens", 1),
            candidates=reader.integer("planning.candidates", 1, MAX_CANDIDATES),
            candidate_temperature=reader.number("planning.candidate_temperature", minimum=0.0),
        )
    except (ValueError, DecodeConfigError) as exc:
        reader.fail_section("planning/detection", str(exc), before)

    detection_rate_hz = reader.number("detection.rate_hz", minimum=0.0)
    detection_camera = camera_index(reader, "detection.camera", cameras, reader.text("detection.camera").strip())
    vqa_cameras = camera_list(reader, "vqa.cameras", cameras)
    lifetime = reader.number("markers.lifetime_s", minimum=0.0)
    plan_lifetime = lifetime or (1.0 / rate_hz if rate_hz > 0 else 1.0)
    detection_lifetime = lifetime or (1.0 / detection_rate_hz if detection_rate_hz > 0 else 1.0)
    pose_values = reader.numbers("debug.camera_pose")
    pose: tuple[float, float, float, float, float, float] | None = None
    if len(pose_values) == 6:
        pose = (pose_values[0], pose_values[1], pose_values[2], pose_values[3], pose_values[4], pose_values[5])
    elif pose_values not in ([], [0.0]):
        reader.fail("debug.camera_pose", f"needs 6 numbers [x, y, z, roll, pitch, yaw] or [0.0], got {pose_values}")

    config = NodeConfig(
        values=dict(reader.values),
        autostart=reader.boolean("autostart"),
        model_path=model_path,
        device=device,
        dtype=dtype,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        preprocess=preprocess,
        cpu_threads=reader.integer("model.cpu_threads", 0),
        unload_on_deactivate=reader.boolean("model.unload_on_deactivate"),
        warmup=reader.boolean("model.warmup"),
        warmup_image_size=(int(warmup_size[0]), int(warmup_size[1])),
        decode=decode,
        template=template,
        system=system_text or None,
        cameras=cameras,
        planning_cameras=plan_cameras,
        fallback_hfov_deg=reader.number(
            "cameras.fallback_hfov_deg", positive=True, maximum=180.0, exclusive_maximum=True
        ),
        rate_hz=rate_hz,
        frame_id=frame_id or "base_link",
        max_plan_age_s=reader.number("planning.max_plan_age_s", positive=True),
        sync=sync,
        qos=_qos(reader),
        acceleration_filter=acceleration_filter,
        planning=planning,
        detection_rate_hz=detection_rate_hz,
        detection_camera=detection_camera,
        detection_marker_depth_m=reader.number("detection.marker_depth_m", positive=True),
        vqa_enabled=reader.boolean("vqa.enabled"),
        vqa_cameras=vqa_cameras,
        marker_lifetime_s=plan_lifetime,
        detection_marker_lifetime_s=detection_lifetime,
        diagnostics_period_s=reader.number("diagnostics.period_s", positive=True),
        warn_throttle_s=reader.number("diagnostics.warn_throttle_s", minimum=0.0),
        invalid_rate_window=reader.integer("diagnostics.invalid_rate_window", 1),
        debug_image=reader.boolean("debug.image"),
        debug_camera_pose=pose,
        viewer_port=reader.integer("viewer.port", 0),
        viewer_host=reader.text("viewer.host"),
        command_source=reader.text("command.source", COMMAND_SOURCES),
        turn_signal_hold_s=reader.number("command.turn_signal_hold_s", minimum=0.0),
        route_lookahead_m=reader.number("command.route_lookahead_m", minimum=0.0),
        route_lateral_threshold_m=reader.number("command.route_lateral_threshold_m", minimum=0.0),
        autoware_outputs=reader.boolean("autoware.outputs"),
        wheelbase_m=reader.number("vehicle.wheelbase_m", positive=True),
    )
    if config.viewer_port > 65535:
        reader.fail("viewer.port", f"must be <= 65535, got {config.viewer_port}")
    if not config.viewer_host.strip():
        reader.fail("viewer.host", "must not be empty (127.0.0.1 serves this machine only)")
    unknown = sorted(set(reader.values) - set(SPEC_BY_NAME) - {"use_sim_time", "start_type_description_service"})
    known_prefixes = tuple(s.name.split(".")[0] + "." for s in PARAMETER_SPECS if "." in s.name)
    for name in unknown:
        if name.startswith(known_prefixes):
            reader.fail(name, "unknown parameter (misspelt?)")
    if reader.errors:
        raise ParameterError("invalid parameters:\n  " + "\n  ".join(reader.errors))
    return config
