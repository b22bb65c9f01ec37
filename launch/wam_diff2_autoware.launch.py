"""Launch the WAM-Diff2 planner in Autoware's end-to-end slot, with Autoware's topic names (docs/autoware.md).

    ros2 launch wam_diff2_ros wam_diff2_autoware.launch.py model_path:=/path/to/checkpoint use_sim_time:=true

What ``autoware_tensorrt_vad`` reads, this node reads: the front camera ``/sensing/camera/<camera>/image_raw``
(``image_transport:=compressed``: ``.../image_raw/compressed``) and its ``camera_info``,
``/localization/kinematic_state``, ``/localization/acceleration``, with VAD's input QoS (images and
acceleration best effort depth 1, camera info best effort depth 10, kinematic state reliable depth 1); and, which
VAD lacks, a navigation command: by default the route's turn signal ``/planning/turn_indicators_cmd``
(``command_source:=turn_indicators``), and ``command_default`` (``straight``) while no turn signal arrives, as in
a stack without the rule-based planner that publishes it (the node warns once when it plans with the default).
``command_source`` takes every ``command.source`` of the node (``COMMAND_SOURCES``): ``fixed`` plans with
``command_default`` always and reads no command input; ``command_topic`` renames the chosen source's input
(docs/autoware.md says which to use when). It publishes ``autoware_planning_msgs/Trajectory`` on
``output_trajectory`` and ``CandidateTrajectories`` on ``output_candidates`` (``autoware.outputs: true``).

Arguments (``--show-args``): ``model_path``, ``device``, ``dtype``, ``params_file``, ``namespace``, ``node_name``,
``use_sim_time``, ``log_level``, ``sigterm_timeout`` as in ``wam_diff2.launch.py``; ``camera``,
``image_transport``, ``image_topic``, ``camera_info_topic`` (empty = derived from ``camera``),
``kinematic_state_topic``, ``acceleration_topic``, ``turn_indicators_topic``, ``command_source``,
``command_default``, ``command_topic``, ``output_trajectory``,
``output_candidates``, ``wheelbase`` (``vehicle.wheelbase_m``; empty = the parameter file's).

The launch checks, like ``wam_diff2.launch.py``, that everything it starts exists before returning any action.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from launch import LaunchDescription
from wam_diff2_ros.ros.inputs import INPUTS
from wam_diff2_ros.ros.params.specs import COMMAND_SOURCES


def _base() -> ModuleType:
    """The package's ``wam_diff2.launch.py`` beside this file (its share dir, its checks, its Fast DDS setup)."""
    path = Path(__file__).resolve().with_name("wam_diff2.launch.py")
    spec = importlib.util.spec_from_file_location("wam_diff2_launch_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: (name, default, description)
ARGUMENTS: tuple[tuple[str, str, str], ...] = (
    ("model_path", "", "checkpoint directory (overrides model.path; empty = keep the params file's)"),
    ("device", "", "auto | cpu | cuda[:N] | npu[:N] (overrides model.device; empty = keep)"),
    ("dtype", "", "bfloat16 | float16 | float32 (overrides model.dtype; empty = keep)"),
    ("params_file", "", "parameter YAML (empty = the package's config/wam_diff2.yaml)"),
    ("namespace", "", "namespace of the node"),
    ("node_name", "wam_diff2", "name of the node"),
    ("use_sim_time", "false", "use /clock (simulation, bag replay)"),
    ("log_level", "info", "debug | info | warn | error"),
    ("sigterm_timeout", "5", "seconds launch waits after SIGINT before SIGTERM"),
    ("camera", "CAM_FRONT", "front camera name in Autoware's sensing topics"),
    ("image_transport", "raw", "raw | compressed (…/image_raw or …/image_raw/compressed)"),
    ("image_topic", "", "front camera image topic (empty = /sensing/camera/<camera>/image_raw[/compressed])"),
    ("camera_info_topic", "", "front camera info topic (empty = /sensing/camera/<camera>/camera_info)"),
    ("kinematic_state_topic", "/localization/kinematic_state", "nav_msgs/Odometry (pose in map)"),
    ("acceleration_topic", "/localization/acceleration", "geometry_msgs/AccelWithCovarianceStamped"),
    ("turn_indicators_topic", "/planning/turn_indicators_cmd", "TurnIndicatorsCommand: the navigation command"),
    ("command_source", "turn_indicators", f"command.source: {' | '.join(COMMAND_SOURCES)}"),
    (
        "command_default",
        "straight",
        "command.default: left | straight | right | unknown, used while no (fresh) command arrives and always with "
        "command_source fixed; empty = the params file's (no plan without a command)",
    ),
    ("command_topic", "", "topic of command_source's input (empty = turn_indicators_topic, or the node's own name)"),
    ("output_trajectory", "/planning/trajectory", "autoware_planning_msgs/Trajectory (the follower's input)"),
    (
        "output_candidates",
        "/planning/generator/wam_diff2/candidate_trajectories",
        "autoware_internal_planning_msgs/CandidateTrajectories (a ranker's input)",
    ),
    ("wheelbase", "", "vehicle.wheelbase_m (m) for the front wheel angles (empty = the params file's)"),
)
#: VAD's subscription QoS (vad_node.cpp), as this node's qos.* parameters.
VAD_QOS = {
    "qos.image.reliability": "best_effort",
    "qos.image.depth": 1,
    "qos.camera_info.reliability": "best_effort",
    "qos.camera_info.depth": 10,
    "qos.odometry.reliability": "reliable",
    "qos.odometry.depth": 1,
    "qos.acceleration.reliability": "best_effort",
    "qos.acceleration.depth": 1,
    "qos.turn_indicators.reliability": "best_effort",  # receives from a reliable publisher too
    "qos.turn_indicators.depth": 1,
}


def launch_setup(context: object, *args: object, **kwargs: object) -> list[object]:
    """The node with Autoware's names, parameters and QoS from the launch arguments."""
    base = _base()

    def arg(name: str) -> str:
        return str(LaunchConfiguration(name).perform(context)).strip()

    share = base.share_dir()
    params_file = arg("params_file") or str(share / "config" / "wam_diff2.yaml")
    problems = base.requirement_problems(params_file, False, "")
    transport = arg("image_transport") or "raw"
    if transport not in ("raw", "compressed"):
        problems.append(f"image_transport must be raw or compressed, got {transport!r}")
    source = arg("command_source") or "turn_indicators"
    if source not in COMMAND_SOURCES:
        problems.append(f"command_source must be one of {', '.join(COMMAND_SOURCES)}, got {source!r}")
    if source == "fixed" and not arg("command_default"):
        problems.append("command_source fixed plans with command_default: set it (left, straight, right or unknown)")
    if problems:
        raise base.LaunchRequirementError("cannot launch, nothing was started: " + "; ".join(problems))
    camera = arg("camera") or "CAM_FRONT"
    image_topic = arg("image_topic") or f"/sensing/camera/{camera}/image_raw" + (
        "/compressed" if transport == "compressed" else ""
    )
    overrides: dict[str, object] = {
        "use_sim_time": base._is_true(arg("use_sim_time")),
        "autoware.outputs": True,
        "command.source": source,
        "cameras.transports": [transport],
        **VAD_QOS,
    }
    for argument, parameter in (("model_path", "model.path"), ("device", "model.device"), ("dtype", "model.dtype")):
        if arg(argument):
            overrides[parameter] = arg(argument)
    if arg("wheelbase"):
        overrides["vehicle.wheelbase_m"] = float(arg("wheelbase"))
    if arg("command_default"):
        overrides["command.default"] = arg("command_default")
    remappings = [
        ("~/input/image_0", image_topic),
        ("~/input/camera_info_0", arg("camera_info_topic") or f"/sensing/camera/{camera}/camera_info"),
        ("~/input/odometry", arg("kinematic_state_topic")),
        ("~/input/acceleration", arg("acceleration_topic")),
        *_command_remaps(source, arg("command_topic"), arg("turn_indicators_topic")),
        ("~/output/autoware/trajectory", arg("output_trajectory")),
        ("~/output/autoware/candidates", arg("output_candidates")),
    ]
    actions: list[object] = base.profile_actions(share)
    actions.append(base.planner_node(arg, [params_file, overrides], remappings))
    return actions


def _command_remaps(source: str, command_topic: str, turn_indicators_topic: str) -> list[tuple[str, str]]:
    """The remap of ``source``'s command input (the first of its inputs in the node's table; none for ``fixed``):
    to ``command_topic``, or for ``turn_indicators`` to ``turn_indicators_topic``, or kept."""
    spec = next((s for s in INPUTS if s.command_source == source), None)
    if spec is None:
        return []
    topic = command_topic or (turn_indicators_topic if source == "turn_indicators" else "")
    return [(f"~/input/{spec.role}", topic)] if topic else []


def generate_launch_description() -> LaunchDescription:
    """The launch description: the arguments above, then :func:`launch_setup`."""
    declared = [
        DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=launch_setup)])
