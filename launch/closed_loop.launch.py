"""Launch a closed-loop episode over DDS: the simulator node beside the WAM-Diff2 planner node.

    ros2 launch wam_diff2_ros closed_loop.launch.py scenario:=left_r20 model_path:=demo out:=/tmp/left_r20

The simulator (``wam-diff2-drive SCENARIO --dds``, node ``wam_diff2_sim``) publishes ``/clock`` and the sensor
topics (``/camera/front/image_raw``, ``/camera/front/camera_info``, ``/odom``, ``/imu/acceleration``,
``/navigation/command``); the planner node runs with ``use_sim_time: true`` and ``planning.rate_hz: 0`` (a plan
on each new image; the simulator takes the ones an in-process episode would), its inputs remapped to those topics,
reliable, and the model an in-process episode would run (the same dtype and decoding engine; the simulator refuses a
node whose model differs). The simulator waits for each plan on simulated time, writes the episode's outputs
(score.json, report.html, the MCAP, bev.mp4; docs/closed_loop.md) and exits; its exit shuts the launch down.

Arguments: ``scenario`` (built-in name, file or FILE:NAME), ``model_path`` (``demo``, ``tiny`` or a checkpoint
directory), ``out`` (output folder), ``latency_ms`` (500: a plan takes effect this long after its instant),
``seed`` and ``duration`` (empty = the scenario's), ``size`` (960x540), ``device``, ``params_file`` (default: the
package's ``config/wam_diff2.yaml``), ``overwrite`` (false).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription

PACKAGE = "wam_diff2_ros"
SIM_TOPICS = {
    "~/input/image_0": "/camera/front/image_raw",
    "~/input/camera_info_0": "/camera/front/camera_info",
    "~/input/odometry": "/odom",
    "~/input/acceleration": "/imu/acceleration",
    "~/input/command": "/navigation/command",
}
ARGUMENTS: tuple[tuple[str, str, str], ...] = (
    ("scenario", "sample", "built-in scenario name, scenario file, or FILE:NAME"),
    ("model_path", "demo", "demo | tiny | checkpoint directory"),
    ("out", "closed_loop_out", "output folder (score.json, report.html, episode/, bev.mp4)"),
    ("latency_ms", "500", "a plan takes effect this long after its instant"),
    ("seed", "", "override the scenario's seed (empty = keep)"),
    ("duration", "", "override the scenario's duration_s (empty = keep)"),
    ("size", "960x540", "camera image size"),
    ("device", "", "model.device of the planner node (empty = the params file's)"),
    ("params_file", "", "planner parameter YAML (empty = the package's config/wam_diff2.yaml)"),
    ("overwrite", "false", "replace existing outputs in out"),
)


def _planner_launch() -> object:
    """The planner's launch file (its share directory and Fast DDS profile helpers)."""
    spec = importlib.util.spec_from_file_location("wam_diff2_launch", Path(__file__).with_name("wam_diff2.launch.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch_setup(context: object, *args: object, **kwargs: object) -> list[object]:
    """The planner node, the simulator node and the shutdown when the simulator exits."""

    def arg(name: str) -> str:
        return str(LaunchConfiguration(name).perform(context)).strip()

    planner = _planner_launch()
    share = planner.share_dir()
    params_file = arg("params_file") or str(share / "config" / "wam_diff2.yaml")
    problems = planner.requirement_problems(params_file, False, "")
    simulator = planner.executable_problem(PACKAGE, "wam-diff2-drive")
    if simulator:
        problems.append(simulator)
    if problems:
        raise planner.LaunchRequirementError("cannot launch, nothing was started: " + "; ".join(problems))
    overrides: dict[str, object] = {
        "use_sim_time": True,
        "planning.rate_hz": 0.0,
        "model.path": arg("model_path"),
        **{f"qos.{key}.reliability": "reliable" for key in ("image", "camera_info", "odometry", "acceleration")},
    }
    if arg("device"):
        overrides["model.device"] = arg("device")
    # the model an in-process episode of the same --model runs (dtype, decoding engine); the simulator checks it
    from wam_diff2_ros.drive.dds import same_model_overrides

    overrides.update(same_model_overrides(arg("model_path"), arg("device") or None))
    sim_arguments = [
        arg("scenario"),
        "--dds",
        "--model",
        arg("model_path"),
        "--out",
        arg("out"),
        "--latency-ms",
        arg("latency_ms"),
        "--size",
        arg("size"),
    ]
    for name, flag in (("seed", "--seed"), ("duration", "--duration"), ("device", "--device")):
        if arg(name):
            sim_arguments += [flag, arg(name)]
    if arg("overwrite").lower() in ("true", "1", "yes", "on"):
        sim_arguments.append("--overwrite")
    sim = Node(
        package=PACKAGE,
        executable="wam-diff2-drive",
        name="wam_diff2_sim",
        arguments=sim_arguments,
        output="screen",
        emulate_tty=True,
    )
    return [
        *planner.profile_actions(share),
        Node(
            package=PACKAGE,
            executable="wam_diff2_node",
            name="wam_diff2",
            parameters=[params_file, overrides],
            remappings=list(SIM_TOPICS.items()),
            output="screen",
            emulate_tty=True,
        ),
        sim,
        RegisterEventHandler(
            OnProcessExit(target_action=sim, on_exit=[EmitEvent(event=Shutdown(reason="the episode is over"))])
        ),
    ]


def generate_launch_description() -> LaunchDescription:
    """The launch description: the arguments above, then :func:`launch_setup`."""
    declared = [
        DeclareLaunchArgument(name, default_value=default, description=text) for name, default, text in ARGUMENTS
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=launch_setup)])
