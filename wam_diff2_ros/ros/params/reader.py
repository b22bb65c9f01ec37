"""Validation of parameter values into a :class:`~.config.NodeConfig` (every problem collected, raised together
as one :class:`~.specs.ParameterError`), the rules it records for the typed ROS declarations
(:func:`parameter_rules`), and the parameters YAML (:func:`load_parameters_file`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
from wam_diff2_ros.demo.resolve import is_model_name

from .cameras import camera_index, camera_list, planning_cameras, planning_template, read_cameras
from .config import NodeConfig, QosSettings
from .specs import (
    DEFAULT_NODE_NAME,
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
class ParameterRule:
    """What validation checks for one parameter, as recorded from :meth:`NodeConfig.from_parameters` (the
    typed ROS declarations derive their ranges and constraints from it; see :func:`parameter_rules`)."""

    kind: str  # boolean | integer | number | text | strings | numbers
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    choices: tuple[str, ...] | None = None

    def describe(self) -> str:
        """The constraint in words (``> 0``, ``in [0, 1]``, ``one of a|b``), '' without one."""
        if self.choices:
            return "one of " + "|".join(self.choices)
        low = None if self.minimum is None else ("> " if self.exclusive_minimum else ">= ") + f"{self.minimum:g}"
        high = None if self.maximum is None else ("< " if self.exclusive_maximum else "<= ") + f"{self.maximum:g}"
        return ", ".join(part for part in (low, high) if part)


def parameter_rules() -> dict[str, ParameterRule]:
    """Every parameter's :class:`ParameterRule`: validation runs once on the defaults and records what it
    checks, so a parameter added to :data:`PARAMETER_SPECS` and validated in :meth:`NodeConfig.from_parameters`
    gets its declaration's range without a second table. Parameters validation never reads get a rule of
    their default's kind."""
    if not _RULES:
        reader = _Reader({spec.name: spec.default for spec in PARAMETER_SPECS})
        with contextlib.suppress(ParameterError):  # a default that does not validate: its test reports it
            reader.build(NodeConfig, require_model=False)
        for spec in PARAMETER_SPECS:
            _RULES[spec.name] = reader.rules.get(spec.name) or ParameterRule(_kind_of(spec.default))
    return dict(_RULES)


_RULES: dict[str, ParameterRule] = {}


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return "strings"
    return "numbers"


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


class _Reader:
    """Reads typed values and collects problems."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.errors: list[str] = []
        self.rules: dict[str, ParameterRule] = {}

    def fail(self, name: str, problem: str) -> None:
        self.errors.append(f"{name}: {problem}")

    def fail_section(self, section: str, problem: str, errors_before: int) -> None:
        """A section's own check failed (a config class refused its values): reported only when none of its
        parameters was reported since ``errors_before``; otherwise it only repeats that parameter's problem."""
        if len(self.errors) == errors_before:
            self.fail(section, problem)

    def boolean(self, name: str) -> bool:
        self.rules.setdefault(name, ParameterRule("boolean"))
        value = self.values[name]
        if isinstance(value, bool):
            return value
        self.fail(name, f"expected true or false, got {value!r}")
        return bool(SPEC_BY_NAME[name].default)

    def integer(self, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
        self.rules.setdefault(name, ParameterRule("integer", minimum=minimum, maximum=maximum))
        value = self.values[name]
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                self.fail(name, f"expected an integer, got {value!r}")
                return int(SPEC_BY_NAME[name].default)
        if minimum is not None and value < minimum:
            self.fail(name, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            self.fail(name, f"must be <= {maximum}, got {value}")
        return int(value)

    def number(
        self,
        name: str,
        minimum: float | None = None,
        positive: bool = False,
        maximum: float | None = None,
        exclusive_maximum: bool = False,
    ) -> float:
        low = 0.0 if positive and minimum is None else minimum
        rule = ParameterRule("number", low, maximum, positive and minimum is None, exclusive_maximum)
        self.rules.setdefault(name, rule)
        value = self.values[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            self.fail(name, f"expected a finite number, got {value!r}")
            return float(SPEC_BY_NAME[name].default)
        number = float(value)
        if positive and number <= 0:
            self.fail(name, f"must be > 0, got {number:g}")
        if minimum is not None and number < minimum:
            self.fail(name, f"must be >= {minimum:g}, got {number:g}")
        if maximum is not None and (number >= maximum if exclusive_maximum else number > maximum):
            self.fail(name, f"must be {'<' if exclusive_maximum else '<='} {maximum:g}, got {number:g}")
        return number

    def text(self, name: str, choices: Sequence[str] | None = None) -> str:
        self.rules.setdefault(name, ParameterRule("text", choices=tuple(choices) if choices else None))
        value = self.values[name]
        if not isinstance(value, str):
            self.fail(name, f"expected a string, got {value!r}")
            return str(SPEC_BY_NAME[name].default)
        if choices is not None and value not in choices:
            self.fail(name, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def strings(self, name: str) -> list[str]:
        self.rules.setdefault(name, ParameterRule("strings"))
        value = self.values[name]
        if isinstance(value, str):
            return [value]
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
        if isinstance(value, (list, tuple, bytes)) and len(value) == 0:
            return []
        self.fail(name, f"expected a list of strings, got {value!r}")
        return list(SPEC_BY_NAME[name].default)

    def numbers(self, name: str) -> list[float]:
        self.rules.setdefault(name, ParameterRule("numbers"))
        value = self.values[name]
        if isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) for v in value
        ):
            return [float(v) for v in value]
        if isinstance(value, (list, tuple, bytes)) and len(value) == 0:
            return []
        self.fail(name, f"expected a list of finite numbers, got {value!r}")
        return []

    # ---- sections

    def _decode(self) -> DecodeConfig:
        seed = self.integer("decoding.seed", minimum=-1)
        before = len(self.errors)
        try:
            return DecodeConfig(
                max_new_tokens=self.integer("decoding.max_new_tokens", 1),
                block_size=self.integer("decoding.block_size", 1),
                denoising_steps=self.integer("decoding.denoising_steps", 1),
                temperature=self.number("decoding.temperature", minimum=0.0),
                top_k=self.integer("decoding.top_k", 0),
                top_p=self.number("decoding.top_p", positive=True, maximum=1.0),
                remasking_strategy=self.text("decoding.remasking_strategy", REMASKING_STRATEGIES),
                confidence_threshold=self.number("decoding.confidence_threshold", positive=True, maximum=1.0),
                engine=self.text("decoding.engine", ENGINES),
                cuda_graphs=self.boolean("decoding.cuda_graphs"),
                deadline_ms=self.number("decoding.deadline_ms", minimum=0.0),
                seed=None if seed < 0 else seed,
            )
        except DecodeConfigError as exc:
            self.fail_section("decoding", str(exc), before)
            return DecodeConfig()

    def _qos(self) -> dict[str, QosSettings]:
        return {
            name: QosSettings(
                reliability=self.text(f"qos.{name}.reliability", RELIABILITIES),
                depth=self.integer(f"qos.{name}.depth", 1),
                durability=self.text(f"qos.{name}.durability", DURABILITIES),
            )
            for name in QOS_INPUTS
        }

    def build(self, cls: type[NodeConfig], require_model: bool) -> NodeConfig:
        model_path = self.text("model.path").strip()
        if require_model and not model_path:
            self.fail("model.path", "is empty; set it to a checkpoint directory (-p model.path:=/path/to/ckpt)")
        elif model_path and not is_model_name(model_path) and not Path(model_path).expanduser().is_dir():
            self.fail("model.path", f"{model_path!r} is not a directory")
        device = self.text("model.device").strip()
        base = device.split(":", 1)[0]
        if base not in ("auto", "cpu", "cuda", "npu") or (":" in device and not device.split(":", 1)[1].isdigit()):
            self.fail("model.device", f"expected {DEVICES_HINT}, got {device!r}")
        dtype = self.text("model.dtype", DTYPES)
        before = len(self.errors)
        min_pixels = self.integer("model.min_pixels", 1)
        preprocess = self.text("model.preprocess", PREPROCESS_MODES)
        max_pixels = self.integer("model.max_pixels", 1)
        if max_pixels < min_pixels:
            self.fail_section("model.max_pixels", f"{max_pixels} is smaller than model.min_pixels {min_pixels}", before)
        warmup_size = self.numbers("model.warmup_image_size")
        if len(warmup_size) != 2 or not all(v >= 1 and v.is_integer() for v in warmup_size):
            self.fail("model.warmup_image_size", f"needs [width, height] in whole pixels >= 1, got {warmup_size}")
            warmup_size = [float(v) for v in SPEC_BY_NAME["model.warmup_image_size"].default]
        decode = self._decode()
        cameras = read_cameras(self)
        plan_cameras = planning_cameras(self, cameras)
        template = planning_template(self, cameras, plan_cameras)
        system_text = self.text("prompt.system")
        rate_hz = self.number("planning.rate_hz", minimum=0.0)
        frame_id = self.text("planning.frame_id").strip()
        if not frame_id:
            self.fail("planning.frame_id", "must not be empty")

        sync = SyncConfig()
        default_command_text = self.text("command.default").strip()
        default_command = None
        if default_command_text:
            try:
                default_command = parse_navigation_command(default_command_text)
            except ValueError as exc:
                self.fail("command.default", str(exc))
        before = len(self.errors)
        try:
            sync = SyncConfig(
                max_skew_ms=self.number("sync.max_skew_ms", positive=True),
                max_age_ms=self.number("sync.max_age_ms", positive=True),
                max_image_age_ms=self.number("sync.max_image_age_ms", positive=True),
                acceleration_source=self.text("acceleration.source", ACCELERATION_SOURCES),
                command_max_age_s=self.number("command.max_age_s", minimum=0.0),
                default_command=default_command,
            )
        except ValueError as exc:
            self.fail_section("sync", str(exc), before)
        acceleration_filter = AccelerationFilterConfig()
        before = len(self.errors)
        try:
            acceleration_filter = AccelerationFilterConfig(
                window_s=self.number("acceleration.window_s", positive=True),
                min_samples=self.integer("acceleration.min_samples", 2),
                min_span_s=self.number("acceleration.min_span_s", positive=True),
                include_centripetal=self.boolean("acceleration.include_centripetal"),
            )
        except ValueError as exc:
            self.fail_section("acceleration", str(exc), before)

        kinematics = DEFAULT_KINEMATIC_LIMITS
        before = len(self.errors)
        try:
            kinematics = KinematicLimits(
                **{
                    name: (
                        self.boolean(f"planning.kinematics.{name}")
                        if name == "allow_reverse"
                        else self.number(f"planning.kinematics.{name}", minimum=0.0)
                        if name == "max_backward_m"
                        else self.number(f"planning.kinematics.{name}", positive=True)
                    )
                    for name in KINEMATICS_DESCRIPTIONS
                }
            )
        except ValueError as exc:
            self.fail_section("planning.kinematics", str(exc), before)
        planning = PlanningConfig()
        categories = tuple(c.strip() for c in self.strings("detection.categories"))
        before = len(self.errors)
        try:
            planning = PlanningConfig(
                template=template if not any(e.startswith("prompt.template") for e in self.errors) else "navsim",
                system=system_text or None,
                decode=decode,
                num_waypoints=self.integer("planning.num_waypoints", 1),
                waypoint_dt_s=self.number("planning.waypoint_dt_s", positive=True),
                max_abs_coord_m=self.number("planning.max_abs_coord_m", positive=True),
                max_step_m=self.number("planning.max_step_m", positive=True),
                min_confidence=self.number("planning.min_confidence", minimum=0.0, maximum=1.0),
                kinematics=kinematics,
                detection_categories=categories,
                detection_max_new_tokens=self.integer("detection.max_new_tokens", 1),
                vqa_max_new_tokens=self.integer("vqa.max_new_tokens", 1),
                candidates=self.integer("planning.candidates", 1, MAX_CANDIDATES),
                candidate_temperature=self.number("planning.candidate_temperature", minimum=0.0),
            )
        except (ValueError, DecodeConfigError) as exc:
            self.fail_section("planning/detection", str(exc), before)

        detection_rate_hz = self.number("detection.rate_hz", minimum=0.0)
        detection_camera = camera_index(self, "detection.camera", cameras, self.text("detection.camera").strip())
        vqa_cameras = camera_list(self, "vqa.cameras", cameras)
        lifetime = self.number("markers.lifetime_s", minimum=0.0)
        plan_lifetime = lifetime or (1.0 / rate_hz if rate_hz > 0 else 1.0)
        detection_lifetime = lifetime or (1.0 / detection_rate_hz if detection_rate_hz > 0 else 1.0)
        pose_values = self.numbers("debug.camera_pose")
        pose: tuple[float, float, float, float, float, float] | None = None
        if len(pose_values) == 6:
            pose = (pose_values[0], pose_values[1], pose_values[2], pose_values[3], pose_values[4], pose_values[5])
        elif pose_values not in ([], [0.0]):
            self.fail("debug.camera_pose", f"needs 6 numbers [x, y, z, roll, pitch, yaw] or [0.0], got {pose_values}")

        config = cls(
            values=dict(self.values),
            autostart=self.boolean("autostart"),
            model_path=model_path,
            device=device,
            dtype=dtype,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            preprocess=preprocess,
            cpu_threads=self.integer("model.cpu_threads", 0),
            unload_on_deactivate=self.boolean("model.unload_on_deactivate"),
            warmup=self.boolean("model.warmup"),
            warmup_image_size=(int(warmup_size[0]), int(warmup_size[1])),
            decode=decode,
            template=template,
            system=system_text or None,
            cameras=cameras,
            planning_cameras=plan_cameras,
            fallback_hfov_deg=self.number(
                "cameras.fallback_hfov_deg", positive=True, maximum=180.0, exclusive_maximum=True
            ),
            rate_hz=rate_hz,
            frame_id=frame_id or "base_link",
            max_plan_age_s=self.number("planning.max_plan_age_s", positive=True),
            sync=sync,
            qos=self._qos(),
            acceleration_filter=acceleration_filter,
            planning=planning,
            detection_rate_hz=detection_rate_hz,
            detection_camera=detection_camera,
            detection_marker_depth_m=self.number("detection.marker_depth_m", positive=True),
            vqa_enabled=self.boolean("vqa.enabled"),
            vqa_cameras=vqa_cameras,
            marker_lifetime_s=plan_lifetime,
            detection_marker_lifetime_s=detection_lifetime,
            diagnostics_period_s=self.number("diagnostics.period_s", positive=True),
            warn_throttle_s=self.number("diagnostics.warn_throttle_s", minimum=0.0),
            invalid_rate_window=self.integer("diagnostics.invalid_rate_window", 1),
            debug_image=self.boolean("debug.image"),
            debug_camera_pose=pose,
            viewer_port=self.integer("viewer.port", 0),
            viewer_host=self.text("viewer.host"),
        )
        if config.viewer_port > 65535:
            self.fail("viewer.port", f"must be <= 65535, got {config.viewer_port}")
        if not config.viewer_host.strip():
            self.fail("viewer.host", "must not be empty (127.0.0.1 serves this machine only)")
        unknown = sorted(set(self.values) - set(SPEC_BY_NAME) - {"use_sim_time", "start_type_description_service"})
        known_prefixes = tuple(s.name.split(".")[0] + "." for s in PARAMETER_SPECS if "." in s.name)
        for name in unknown:
            if name.startswith(known_prefixes):
                self.fail(name, "unknown parameter (misspelt?)")
        if self.errors:
            raise ParameterError("invalid parameters:\n  " + "\n  ".join(self.errors))
        return config


def read_config(cls: type[NodeConfig], values: Mapping[str, Any], require_model: bool = True) -> NodeConfig:
    """``values`` over the defaults, validated into ``cls`` (:meth:`NodeConfig.from_parameters`)."""
    reader = _Reader({**{s.name: s.default for s in PARAMETER_SPECS}, **dict(values)})
    return reader.build(cls, require_model)


def flatten_parameters(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested YAML mappings → dotted parameter names (``{"model": {"path": x}}`` → ``{"model.path": x}``)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_parameters(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def load_parameters_file(path: str | Path, node_name: str = DEFAULT_NODE_NAME) -> dict[str, Any]:
    """Parameters a ``--params-file`` YAML gives node ``node_name``: ``/**`` first, then sections that name
    the node (``wam_diff2``, ``/wam_diff2``, ``/<ns>/wam_diff2``), later ones winning, as rcl applies them."""
    import yaml

    with open(path, encoding="utf-8") as stream:
        document = yaml.safe_load(stream) or {}
    if not isinstance(document, Mapping):
        raise ParameterError(f"{path}: expected a mapping of node names to ros__parameters")
    result: dict[str, Any] = {}
    ordered = sorted(document.items(), key=lambda item: 0 if item[0] == "/**" else 1)
    for key, section in ordered:
        key = str(key)
        matches = key == "/**" or key.strip("/").split("/")[-1] == node_name
        if not matches:
            continue
        if not isinstance(section, Mapping) or "ros__parameters" not in section:
            raise ParameterError(f"{path}: section {key!r} has no ros__parameters")
        result.update(flatten_parameters(section["ros__parameters"] or {}))
    return result
