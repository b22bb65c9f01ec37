"""The node's parameters, one table (:data:`PARAMETER_SPECS`): names, defaults, descriptions, and which apply
live. Defaults that a core configuration also has are read from it (``DecodeConfig()``, ``SyncConfig()``,
``AccelerationFilterConfig()``, ``PlanningConfig()``, ``KinematicLimits``), never typed twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wam_diff2_ros.core.acceleration import AccelerationFilterConfig
from wam_diff2_ros.core.candidates import MAX_CANDIDATES
from wam_diff2_ros.core.device_preprocess import DEFAULT_PREPROCESS, PREPROCESS_MODES
from wam_diff2_ros.core.engine.decoding import ENGINES, REMASKING_STRATEGIES, DecodeConfig
from wam_diff2_ros.core.image_preprocess import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS
from wam_diff2_ros.core.kinematics import DEFAULT_KINEMATIC_LIMITS
from wam_diff2_ros.core.observation import SyncConfig
from wam_diff2_ros.core.planning import PlanningConfig
from wam_diff2_ros.core.prompts import (
    PLANNING_TEMPLATES,
)
from wam_diff2_ros.core.route_command import DEFAULT_LATERAL_THRESHOLD_M, DEFAULT_LOOKAHEAD_M
from wam_diff2_ros.core.trajectory_points import DEFAULT_WHEELBASE_M
from wam_diff2_ros.core.turn_signal import DEFAULT_HOLD_S
from wam_diff2_ros.ros.inputs import CAMERA_TRANSPORTS, QOS_DEFAULT_RELIABILITY, QOS_INPUTS

DEFAULT_NODE_NAME = "wam_diff2"
#: ``decoding.seed`` for "no seed" (``DecodeConfig.seed`` None; ROS parameters have no null).
NO_SEED = -1
# The core configurations whose defaults the table shows (never typed twice).
_DECODE = DecodeConfig()
_PLANNING = PlanningConfig()
_SYNC = SyncConfig()
_ACCELERATION = AccelerationFilterConfig()
TRANSPORTS = CAMERA_TRANSPORTS
RELIABILITIES = ("best_effort", "reliable")
DURABILITIES = ("volatile", "transient_local")
DEVICES_HINT = "auto, cpu, cuda, cuda:N, npu, npu:N"
DTYPES = ("bfloat16", "float16", "float32")
COMMAND_SOURCES = ("topic", "turn_indicators", "route")


class ParameterError(ValueError):
    """One or more parameters are invalid; the message lists every problem."""


@dataclass(frozen=True)
class ParameterSpec:
    """A parameter: dotted name, default value and a one-line description."""

    name: str
    default: Any
    description: str


def _qos_specs(name: str, reliability: str, depth: int, durability: str = "volatile") -> list[ParameterSpec]:
    return [
        ParameterSpec(f"qos.{name}.reliability", reliability, f"{name} subscription reliability: best_effort|reliable"),
        ParameterSpec(f"qos.{name}.depth", depth, f"{name} subscription queue depth (KEEP_LAST)"),
        ParameterSpec(
            f"qos.{name}.durability", durability, f"{name} subscription durability: volatile|transient_local"
        ),
    ]


KINEMATICS_DESCRIPTIONS = {
    "max_speed_mps": "plausibility gate: implied speed between waypoints at most this (m/s)",
    "max_accel_mps2": "plausibility gate: implied longitudinal acceleration at most this (m/s²)",
    "max_decel_mps2": "plausibility gate: implied braking at most this (m/s²)",
    "max_lateral_accel_mps2": "plausibility gate: implied lateral acceleration at most this (m/s²)",
    "min_turn_radius_m": "plausibility gate: implied turn radius at least this (m)",
    "max_backward_m": "plausibility gate: motion against the direction of travel tolerated between waypoints (m)",
    "allow_reverse": "plausibility gate: accept reversing (backward) plans",
    "first_waypoint_tolerance_m": "plausibility gate: first waypoint within this of current speed × dt (m)",
}


def _kinematics_specs() -> list[ParameterSpec]:
    return [
        ParameterSpec(f"planning.kinematics.{name}", getattr(DEFAULT_KINEMATIC_LIMITS, name), description)
        for name, description in KINEMATICS_DESCRIPTIONS.items()
    ]


PARAMETER_SPECS: tuple[ParameterSpec, ...] = (
    ParameterSpec(
        "autostart", True, "configure and activate at start (plain `ros2 run`); false: wait for lifecycle transitions"
    ),
    ParameterSpec(
        "model.path", "", "checkpoint directory (config.json, *.safetensors, tokenizer), or 'demo'; required"
    ),
    ParameterSpec("model.device", "auto", f"device: {DEVICES_HINT}"),
    ParameterSpec("model.dtype", "bfloat16", "weight dtype: bfloat16|float16|float32 (float32 on CPU)"),
    ParameterSpec("model.min_pixels", DEFAULT_MIN_PIXELS, "smallest image area after the processor's resize"),
    ParameterSpec("model.max_pixels", DEFAULT_MAX_PIXELS, "largest image area after the processor's resize"),
    ParameterSpec(
        "model.preprocess",
        DEFAULT_PREPROCESS,
        "|".join(PREPROCESS_MODES) + ": where images are resized and cut into patches (host: PIL on the CPU; "
        "device: the uint8 frame is moved first, resized and cut by torch on model.device, with the host's pixel "
        "values)",
    ),
    ParameterSpec(
        "model.cpu_threads",
        0,
        "torch threads when the model runs on the CPU; 0 = one fewer than the cores this process may use (at "
        "least 1), leaving a core to the executor and DDS",
    ),
    ParameterSpec("model.unload_on_deactivate", False, "deactivate also unloads the model (activate reloads it)"),
    ParameterSpec(
        "model.warmup",
        False,
        "run one plan on gray frames at configure so the first real plan is not slowed by lazy initialisation "
        "(and, with the fast engine on CUDA, finds its CUDA graphs captured)",
    ),
    ParameterSpec(
        "model.warmup_image_size",
        [1920, 1080],
        "[width, height] of the warm-up's gray frames (one per camera): your cameras' size, so the warm-up "
        "plan has the real plans' prompt length and KV-cache bucket",
    ),
    ParameterSpec(
        "decoding.max_new_tokens",
        _DECODE.max_new_tokens,
        "response token budget for plans (rounded up to whole blocks)",
    ),
    ParameterSpec("decoding.block_size", _DECODE.block_size, "tokens per diffusion block"),
    ParameterSpec("decoding.denoising_steps", _DECODE.denoising_steps, "maximum denoising steps per block"),
    ParameterSpec("decoding.temperature", _DECODE.temperature, "sampling temperature; 0 = greedy"),
    ParameterSpec("decoding.top_k", _DECODE.top_k, "top-k sampling; 0 = off"),
    ParameterSpec("decoding.top_p", _DECODE.top_p, "nucleus sampling mass in (0, 1]; 1 = off"),
    ParameterSpec("decoding.remasking_strategy", _DECODE.remasking_strategy, "|".join(REMASKING_STRATEGIES)),
    ParameterSpec(
        "decoding.confidence_threshold",
        _DECODE.confidence_threshold,
        "low_confidence_dynamic unmasking threshold in (0, 1]",
    ),
    ParameterSpec(
        "decoding.seed", NO_SEED if _DECODE.seed is None else _DECODE.seed, "random seed for sampling; -1 = none"
    ),
    ParameterSpec("decoding.engine", _DECODE.engine, "|".join(ENGINES) + "; auto: see docs/engine.md"),
    ParameterSpec("decoding.cuda_graphs", _DECODE.cuda_graphs, "fast engine on CUDA: replay captured steps"),
    ParameterSpec(
        "decoding.deadline_ms",
        _DECODE.deadline_ms,
        "plan deadline (ms) from the plan's start: fewer denoising steps when needed; 0 = none",
    ),
    ParameterSpec(
        "prompt.template", _PLANNING.template, f"planning template: {'|'.join(PLANNING_TEMPLATES)} or custom text"
    ),
    ParameterSpec("prompt.system", "", "system turn text; empty = no system turn (as trained)"),
    ParameterSpec("cameras.names", ["front"], "camera names (topics ~/input/image_<n>); the first is the front camera"),
    ParameterSpec("cameras.transports", ["raw"], "per camera raw|compressed (one entry applies to all)"),
    ParameterSpec(
        "cameras.frame_ids", [""], "per camera optical frame used when header.frame_id is empty ('' = <name>_optical)"
    ),
    ParameterSpec("cameras.fallback_hfov_deg", 70.0, "horizontal FOV of the pinhole used without CameraInfo"),
    ParameterSpec(
        "planning.cameras",
        [""],
        "cameras whose images go in the planning prompt, in prompt order, the front camera first; [''] = all",
    ),
    ParameterSpec("planning.rate_hz", 2.0, "planning rate on the node clock; 0 = on each new front image"),
    ParameterSpec(
        "planning.frame_id",
        "base_link",
        "frame of ~/output/path, ~/output/trajectory and the path markers: base_link (vehicle frame), or the "
        "odometry's header.frame_id (e.g. odom) for the plan transformed by the ego pose; never a relabel",
    ),
    ParameterSpec(
        "planning.max_plan_age_s",
        2.0,
        "a plan older than this (node clock − image stamp) when ready is not published (valid=false, stale)",
    ),
    ParameterSpec(
        "planning.min_confidence",
        _PLANNING.min_confidence,
        "a plan whose confidence (its least sure waypoint, in [0, 1]) is below this is not published; 0 = off",
    ),
    ParameterSpec(
        "planning.candidates",
        _PLANNING.candidates,
        f"answers decoded per plan in one batch (row 0 greedy, others sampled), each gated and scored; the valid "
        f"one with the highest confidence is published; 1 = one greedy plan; at most {MAX_CANDIDATES}",
    ),
    ParameterSpec(
        "planning.candidate_temperature",
        _PLANNING.candidate_temperature,
        "sampling temperature of candidate rows 1.. (> 0 with planning.candidates > 1; top-k/top-p: decoding.*)",
    ),
    ParameterSpec("planning.num_waypoints", _PLANNING.num_waypoints, "waypoints the model answers with"),
    ParameterSpec("planning.waypoint_dt_s", _PLANNING.waypoint_dt_s, "time between waypoints (pose i at (i+1)·dt)"),
    ParameterSpec(
        "planning.max_abs_coord_m", _PLANNING.max_abs_coord_m, "answers with a coordinate beyond this are invalid"
    ),
    ParameterSpec(
        "planning.max_step_m",
        _PLANNING.max_step_m,
        "answers with a step between waypoints longer than this are invalid",
    ),
    *_kinematics_specs(),
    ParameterSpec("sync.max_skew_ms", _SYNC.max_skew_ms, "other cameras' stamps within this of the front image stamp"),
    ParameterSpec(
        "sync.max_age_ms", _SYNC.max_age_ms, "odometry/acceleration stamps within this of the front image stamp"
    ),
    ParameterSpec(
        "sync.max_image_age_ms",
        _SYNC.max_image_age_ms,
        "front image at most this old on the node clock (sim time aware)",
    ),
    *(spec for name in QOS_INPUTS for spec in _qos_specs(name, QOS_DEFAULT_RELIABILITY[name], 1)),
    ParameterSpec(
        "acceleration.source", _SYNC.acceleration_source, "auto (topic when fresh, else derived) | topic | odometry"
    ),
    ParameterSpec(
        "acceleration.window_s",
        _ACCELERATION.window_s,
        "odometry window of the derived acceleration (least-squares slope)",
    ),
    ParameterSpec(
        "acceleration.min_samples", _ACCELERATION.min_samples, "odometry samples the derivation needs in the window"
    ),
    ParameterSpec("acceleration.min_span_s", _ACCELERATION.min_span_s, "time those samples must span"),
    ParameterSpec(
        "acceleration.include_centripetal",
        _ACCELERATION.include_centripetal,
        "add ω × v (what an IMU in base_link measures)",
    ),
    ParameterSpec(
        "command.default", "", "command used without a (fresh) one: left|straight|right|unknown; '' = no plan"
    ),
    ParameterSpec(
        "command.max_age_s",
        _SYNC.command_max_age_s,
        "a command older than this counts as missing (3 s: a 1 Hz topic may lose 2); 0 = never expires",
    ),
    ParameterSpec(
        "command.source",
        COMMAND_SOURCES[0],
        "where the command comes from: topic (~/input/command, ~/input/driving_command), turn_indicators "
        "(Autoware's TurnIndicatorsCommand on ~/input/turn_indicators, an approximation of a route command) or "
        "route (nav_msgs/Path of the route's centre line on ~/input/route, base_link or the odometry's frame)",
    ),
    ParameterSpec(
        "command.turn_signal_hold_s",
        DEFAULT_HOLD_S,
        "turn_indicators, route: a turn signal switched off (a route that looks straight) counts as straight "
        "only after this long (blinks, drops)",
    ),
    ParameterSpec(
        "command.route_lookahead_m",
        DEFAULT_LOOKAHEAD_M,
        "route: the command looks at the first route point at least this far from the ego",
    ),
    ParameterSpec(
        "command.route_lateral_threshold_m",
        DEFAULT_LATERAL_THRESHOLD_M,
        "route: left/right when that point is more than this far to the side, else straight",
    ),
    ParameterSpec(
        "autoware.outputs",
        False,
        "also publish ~/output/autoware/trajectory (autoware_planning_msgs/Trajectory) and "
        "~/output/autoware/candidates (autoware_internal_planning_msgs/CandidateTrajectories)",
    ),
    ParameterSpec(
        "vehicle.wheelbase_m",
        DEFAULT_WHEELBASE_M,
        "wheelbase for the Autoware trajectory's front wheel angles (kinematic bicycle model)",
    ),
    ParameterSpec("detection.rate_hz", 0.0, "detection rate on the node clock; 0 = off"),
    ParameterSpec("detection.categories", list(_PLANNING.detection_categories), "categories asked for"),
    ParameterSpec("detection.camera", "", "camera to run detection on; '' = the front camera"),
    ParameterSpec(
        "detection.max_new_tokens",
        _PLANNING.detection_max_new_tokens,
        "detection answer budget (>= 512 recommended: JSON is long)",
    ),
    ParameterSpec("detection.marker_depth_m", 10.0, "depth of the plane the detection markers are drawn on"),
    ParameterSpec("vqa.enabled", True, "answer questions on ~/input/question"),
    ParameterSpec("vqa.max_new_tokens", _PLANNING.vqa_max_new_tokens, "answer token budget"),
    ParameterSpec("vqa.cameras", [""], "cameras whose latest images go with a question; [''] = all"),
    ParameterSpec("markers.lifetime_s", 0.0, "marker lifetime; 0 = one planning (detection) period, 1 s when rate 0"),
    ParameterSpec("diagnostics.period_s", 1.0, "period of /diagnostics"),
    ParameterSpec("diagnostics.warn_throttle_s", 5.0, "the same input problem is logged at most once per this"),
    ParameterSpec("diagnostics.invalid_rate_window", 20, "plans over which the invalid-answer rate is computed"),
    ParameterSpec("debug.image", True, "publish ~/debug/image (front image, detections, path)"),
    ParameterSpec(
        "debug.camera_pose",
        [0.0],
        "front camera body pose in base_link [x, y, z, roll, pitch, yaw] "
        "(m, rad; REP 103) to draw the path into the image; [0.0] = bird's-eye inset only",
    ),
    ParameterSpec("viewer.port", 0, "serve the live Foxglove view on this TCP port; 0 = off (needs foxglove-sdk)"),
    ParameterSpec(
        "viewer.host",
        "127.0.0.1",
        "address the live view binds to; it has no authentication: never an open network's address",
    ),
)

SPEC_BY_NAME: dict[str, ParameterSpec] = {spec.name: spec for spec in PARAMETER_SPECS}

#: Read once, when the node is constructed: declared read-only.
READ_ONLY_PARAMETERS = frozenset({"autostart"})
#: Sections read where they are used (the next plan, detection, answer or timer period): a change applies
#: live. Everything else shapes the model, subscriptions or publishers (``model.*``, ``cameras.*``, ``qos.*``,
#: and any new section until it is listed here): on a configured node a change is refused ("takes effect after
#: reconfigure"); an unconfigured node accepts it for its next configure. Never accepted and ignored.
LIVE_PREFIXES = (
    "decoding.",
    "prompt.",
    "planning.",
    "sync.",
    "acceleration.",
    "command.",
    "detection.",
    "markers.",
    "diagnostics.",
    "vqa.",
    "debug.",
)
#: Exceptions inside the live sections: they create or remove a subscription or publisher.
RECONFIGURE_PARAMETERS = frozenset({"vqa.enabled", "debug.image", "command.source"})


def needs_reconfigure(name: str) -> bool:
    """True when a change of ``name`` only takes effect at the next configure."""
    return name in RECONFIGURE_PARAMETERS or not name.startswith(LIVE_PREFIXES)
