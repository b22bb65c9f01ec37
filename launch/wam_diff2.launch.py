"""Launch the WAM-Diff2 planner node (and optionally RViz).

    ros2 launch wam_diff2_ros wam_diff2.launch.py model_path:=/path/to/checkpoint \\
        image_topics:=/camera/front/image_raw odometry_topic:=/localization/kinematic_state \\
        command_topic:=/planning/navigation_command rviz:=true

Arguments (``ros2 launch wam_diff2_ros wam_diff2.launch.py --show-args``):

* ``model_path``, ``device``, ``dtype``: override ``model.path|device|dtype`` of the parameter file
  (empty = keep the file's value);
* ``params_file``: parameter YAML (default: the package's ``config/wam_diff2.yaml``);
* ``namespace``, ``node_name``, ``use_sim_time``, ``log_level``;
* ``rviz`` (false): also start RViz (``IfCondition``; rviz2 is not a dependency of the package, so a
  headless vehicle needs none), ``rviz_config`` (default ``config/wam_diff2.rviz``; its topics assume the
  default node name and no namespace);
* ``sigterm_timeout`` (5 s, launch's default): how long ``ros2 launch`` waits after SIGINT before it sends
  SIGTERM (the node exits within about a second, cancelling a running decode). A ``ros2 launch`` stopped by a
  SIGINT to its PID alone (systemd, scripts) escalates to SIGTERM after ``sigterm_timeout`` unless it runs with
  ``--noninteractive``;
* input remaps, one per input of the node's input table (``wam_diff2_ros.ros.inputs``): ``image_topics``
  and ``camera_info_topics`` (comma-separated, in ``cameras.names`` order → ``~/input/image_<n>``,
  ``~/input/camera_info_<n>``), ``odometry_topic``, ``acceleration_topic``, ``command_topic``,
  ``driving_command_topic``, ``turn_indicators_topic``, ``route_topic`` (empty = no remap).

Fast DDS: unless ``FASTDDS_DEFAULT_PROFILES_FILE`` / ``FASTRTPS_DEFAULT_PROFILES_FILE`` is already set,
the package's ``config/fastdds_profile.xml`` is set for every process this launch starts (large images
are otherwise lost; camera drivers started elsewhere need the same variable). The node is a lifecycle
node with ``autostart: true`` in the default parameters, so it configures and activates by itself;
set ``autostart: false`` to drive it with ``ros2 lifecycle set``.

Everything the launch needs (the parameter file, the packages and executables it starts, RViz's config) is
checked before any action is returned: a launch that cannot start all of it starts nothing (launch would
otherwise leave the planner running, orphaned, after RViz failed to start).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription
from wam_diff2_ros.ros.inputs import INPUTS

PACKAGE = "wam_diff2_ros"
PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")

ARGUMENTS: tuple[tuple[str, str, str], ...] = (
    ("model_path", "", "checkpoint directory (overrides model.path; empty = keep the params file's)"),
    ("device", "", "auto | cpu | cuda[:N] | npu[:N] (overrides model.device; empty = keep)"),
    ("dtype", "", "bfloat16 | float16 | float32 (overrides model.dtype; empty = keep)"),
    ("params_file", "", "parameter YAML (empty = the package's config/wam_diff2.yaml)"),
    ("namespace", "", "namespace of the node"),
    ("node_name", "wam_diff2", "name of the node"),
    ("use_sim_time", "false", "use /clock (bag replay, simulation)"),
    ("log_level", "info", "debug | info | warn | error"),
    ("rviz", "false", "also start RViz with rviz_config (needs rviz2, not a dependency of this package)"),
    ("rviz_config", "", "RViz config (empty = the package's config/wam_diff2.rviz)"),
    ("sigterm_timeout", "5", "seconds launch waits after SIGINT before SIGTERM (then sigkill_timeout to SIGKILL)"),
    *(
        (
            spec.request_key,
            "",
            f"comma-separated {spec.label} topics in cameras.names order (→ {spec.topic()}_<n>)"
            if spec.per_camera
            else f"{' or '.join(spec.msg_types)} topic (→ {spec.topic()})",
        )
        for spec in INPUTS
    ),
)


def share_dir() -> Path:
    """The package's share directory: the ament index (colcon install), ``<sys.prefix>/share/wam_diff2_ros``
    (pip install), else the source checkout this file is in."""
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory(PACKAGE))
    except (ImportError, LookupError, OSError, ValueError):  # not indexed, or AMENT_PREFIX_PATH unset
        pass
    installed = Path(sys.prefix) / "share" / PACKAGE
    if (installed / "config" / "wam_diff2.yaml").is_file():
        return installed
    return Path(__file__).resolve().parent.parent


def _is_true(text: str) -> bool:
    return text.strip().lower() in ("true", "1", "yes", "on")


def _topics(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def profile_actions(share: Path) -> list[object]:
    """SetEnvironmentVariable actions pointing Fast DDS at the package profile, unless the user set one."""
    if any(os.environ.get(name) for name in PROFILE_VARIABLES):
        return []
    profile = share / "config" / "fastdds_profile.xml"
    if not profile.is_file():
        return []
    try:
        from wam_diff2_ros.ros.dds import profile_variables

        variables = profile_variables(profile)
    except ImportError:
        variables = {name: str(profile) for name in PROFILE_VARIABLES}
    return [SetEnvironmentVariable(name, value) for name, value in variables.items()]


class LaunchRequirementError(RuntimeError):
    """Something the launch needs is missing; raised before any action exists, so nothing was started."""


def executable_problem(package: str, executable: str) -> str | None:
    """Why ``launch_ros`` would not find ``executable`` of ``package`` (``<prefix>/lib/<package>/``, through the
    ament index), or None; None also where there is no ament index to look in (``ros2 launch`` always has one)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    except ImportError:
        return None
    try:
        prefix = get_package_prefix(package)
    except PackageNotFoundError:
        return f"package '{package}' not found"
    except (LookupError, OSError, ValueError):  # AMENT_PREFIX_PATH unset: no index to check against
        return None
    path = Path(prefix) / "lib" / package / executable
    if not (path.is_file() and os.access(path, os.X_OK)):
        return f"executable '{executable}' not found in package '{package}' ({path.parent})"
    return None


def requirement_problems(params_file: str, rviz: bool, rviz_config: str) -> list[str]:
    """Everything missing for this launch (empty when it can start all it is asked to)."""
    problems = []
    if not Path(params_file).is_file():
        problems.append(f"params_file {params_file!r} is not a file")
    node = executable_problem(PACKAGE, "wam_diff2_node")
    if node:
        problems.append(f"{node} (build and source the workspace: colcon build, source install/setup.bash)")
    if rviz:
        viewer = executable_problem("rviz2", "rviz2")
        if viewer:
            problems.append(f"rviz:=true needs RViz: {viewer} (install ros-$ROS_DISTRO-rviz2, or rviz:=false)")
        if not Path(rviz_config).is_file():
            problems.append(f"rviz_config {rviz_config!r} is not a file")
    return problems


def planner_node(arg: Callable[[str], str], parameters: list[object], remappings: list[tuple[str, str]]) -> Node:
    """The planner node's action: its name, namespace, log level and stop timeout from the launch arguments."""
    return Node(
        package=PACKAGE,
        executable="wam_diff2_node",
        name=arg("node_name") or "wam_diff2",
        namespace=arg("namespace"),
        parameters=parameters,
        remappings=remappings,
        ros_arguments=["--log-level", arg("log_level") or "info"],
        sigterm_timeout=arg("sigterm_timeout") or "5",
        output="screen",
        emulate_tty=True,
    )


def launch_setup(context: object, *args: object, **kwargs: object) -> list[object]:
    """Build the actions from the launch arguments (OpaqueFunction, so empty values can mean "keep")."""

    def arg(name: str) -> str:
        return str(LaunchConfiguration(name).perform(context)).strip()

    share = share_dir()
    params_file = arg("params_file") or str(share / "config" / "wam_diff2.yaml")
    rviz_config = arg("rviz_config") or str(share / "config" / "wam_diff2.rviz")
    problems = requirement_problems(params_file, _is_true(arg("rviz")), rviz_config)
    if problems:
        raise LaunchRequirementError("cannot launch, nothing was started: " + "; ".join(problems))
    use_sim_time = _is_true(arg("use_sim_time"))
    overrides: dict[str, object] = {"use_sim_time": use_sim_time}
    for argument, parameter in (("model_path", "model.path"), ("device", "model.device"), ("dtype", "model.dtype")):
        if arg(argument):
            overrides[parameter] = arg(argument)

    remappings: list[tuple[str, str]] = []
    for spec in INPUTS:
        if spec.per_camera:
            remappings += [(spec.topic(index), topic) for index, topic in enumerate(_topics(arg(spec.request_key)))]
        elif arg(spec.request_key):
            remappings.append((spec.topic(), arg(spec.request_key)))

    actions: list[object] = profile_actions(share)
    actions.append(planner_node(arg, [params_file, overrides], remappings))
    actions.append(
        Node(
            package="rviz2",
            executable="rviz2",
            name="rviz2",
            arguments=["-d", rviz_config],
            parameters=[{"use_sim_time": use_sim_time}],
            output="log",
            condition=IfCondition(LaunchConfiguration("rviz")),
        )
    )
    return actions


def generate_launch_description() -> LaunchDescription:
    """The launch description: the arguments above, then :func:`launch_setup`."""
    declared = [
        DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=launch_setup)])
