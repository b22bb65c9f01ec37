"""Autoware's messages: the node's Autoware outputs and its turn-signal input (docs/autoware.md).

* :func:`trajectory_msg` → ``autoware_planning_msgs/Trajectory`` from the timed points of
  :mod:`wam_diff2_ros.core.trajectory_points` (header: the odometry's frame, the image stamp);
* :func:`candidates_msg` → ``autoware_internal_planning_msgs/CandidateTrajectories`` from a list of
  ``(Trajectory, score)``, best score first, every candidate under the one :data:`GENERATOR_ID` that its
  ``GeneratorInfo`` (name :data:`GENERATOR_NAME`) carries too, so a ranker can name the generator;
* :func:`turn_signal` reads an ``autoware_vehicle_msgs/TurnIndicatorsCommand``.

The packages are Autoware's own where installed; on the pip route ``wam-diff2-build-interfaces`` builds the same
definitions (``interfaces/autoware/``). :func:`configure_problem` says, at configure, which package a requested
Autoware feature lacks and how to get it.
"""

from __future__ import annotations

import functools
import importlib
import uuid
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from wam_diff2_ros.core.trajectory_points import TimedPoint
from wam_diff2_ros.core.units import NS_PER_S

from .conversions import ns_to_duration, ns_to_stamp
from .outputs import yaw_to_quaternion
from .params import NodeConfig

OUTPUT_PACKAGES = ("autoware_planning_msgs", "autoware_internal_planning_msgs", "unique_identifier_msgs")
TURN_SIGNAL_PACKAGE = "autoware_vehicle_msgs"
GENERATOR_NAME = "wam_diff2"
#: The generator's id: the same on every run and machine (a name-based UUID), so a ranker's settings can name it.
GENERATOR_ID = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/wam_diff2_ros/generators/wam_diff2")
#: Autoware's trajectory follower drops a trajectory older than this (``cyclic_message_timeout_thr_sec``).
FOLLOWER_TIMEOUT_S = 0.9


def missing_packages(packages: Sequence[str]) -> list[str]:
    """Those of ``packages`` whose messages do not import here."""
    missing = []
    for name in packages:
        try:
            importlib.import_module(f"{name}.msg")
        except ImportError:
            missing.append(name)
    return missing


def build_hint(packages: Sequence[str]) -> str:
    """How to get ``packages``: an Autoware install, or the interface builder (pip route)."""
    debs = ", ".join(f"ros-$ROS_DISTRO-{name.replace('_', '-')}" for name in packages)
    return (
        f"source an Autoware install ({debs}), or on the pip route run `wam-diff2-build-interfaces` in the source "
        "checkout: it builds them from interfaces/autoware/"
    )


def configure_problem(config: NodeConfig) -> str:
    """Why ``config`` cannot be served here ("" when it can): a requested Autoware output or input whose
    message package is missing, named with how to build it."""
    wanted = []
    if config.autoware_outputs:
        wanted += [name for name in missing_packages(OUTPUT_PACKAGES) if name not in wanted]
    if config.command_source == "turn_indicators":
        wanted += missing_packages([TURN_SIGNAL_PACKAGE])
    if not wanted:
        return ""
    what = "autoware.outputs" if config.autoware_outputs else "command.source turn_indicators"
    if config.autoware_outputs and config.command_source == "turn_indicators":
        what = "autoware.outputs and command.source turn_indicators"
    return f"{what} needs the message package(s) {', '.join(wanted)}, not installed: {build_hint(wanted)}"


@functools.cache
def autoware_messages() -> SimpleNamespace | None:
    """The Autoware output message classes, or None where their packages do not import."""
    try:
        planning = importlib.import_module("autoware_planning_msgs.msg")
        internal = importlib.import_module("autoware_internal_planning_msgs.msg")
        ids = importlib.import_module("unique_identifier_msgs.msg")
        std = importlib.import_module("std_msgs.msg")
    except ImportError:
        return None
    return SimpleNamespace(
        Trajectory=planning.Trajectory,
        TrajectoryPoint=planning.TrajectoryPoint,
        CandidateTrajectories=internal.CandidateTrajectories,
        CandidateTrajectory=internal.CandidateTrajectory,
        GeneratorInfo=internal.GeneratorInfo,
        UUID=ids.UUID,
        String=std.String,
    )


def trajectory_msg(points: Sequence[TimedPoint], frame_id: str, stamp_ns: int, msgs: Any) -> Any:
    """``autoware_planning_msgs/Trajectory``: ``points`` in ``frame_id``, header stamp ``stamp_ns`` (the image's),
    each point's ``time_from_start`` its ``t``."""
    trajectory = msgs.Trajectory()
    trajectory.header.frame_id = frame_id
    trajectory.header.stamp = ns_to_stamp(stamp_ns)
    for point in points:
        out = msgs.TrajectoryPoint()
        out.time_from_start = ns_to_duration(round(point.t * NS_PER_S))
        out.pose.position.x, out.pose.position.y, out.pose.position.z = point.x, point.y, point.z
        out.pose.orientation = yaw_to_quaternion(point.yaw)  # as ~/output/path_fixed's poses
        out.longitudinal_velocity_mps = point.speed
        out.lateral_velocity_mps = 0.0
        out.acceleration_mps2 = point.acceleration
        out.heading_rate_rps = point.heading_rate
        out.front_wheel_angle_rad = point.front_wheel_angle
        out.rear_wheel_angle_rad = 0.0
        trajectory.points.append(out)
    return trajectory


def _uuid_msg(msgs: Any) -> Any:
    return msgs.UUID(uuid=list(GENERATOR_ID.bytes))


def candidates_msg(candidates: Sequence[tuple[Any, float]], msgs: Any) -> Any:
    """``CandidateTrajectories`` of ``(Trajectory, score)`` pairs (every plan made for the instant), best score
    first (the message has no score field), and the one ``GeneratorInfo`` their ``generator_id`` names."""
    out = msgs.CandidateTrajectories()
    for trajectory, _score in sorted(candidates, key=lambda pair: -pair[1]):
        candidate = msgs.CandidateTrajectory()
        candidate.header = trajectory.header
        candidate.generator_id = _uuid_msg(msgs)
        candidate.points = list(trajectory.points)
        out.candidate_trajectories.append(candidate)
    name = msgs.String(data=GENERATOR_NAME)
    out.generator_info.append(msgs.GeneratorInfo(generator_id=_uuid_msg(msgs), generator_name=name))
    return out


def turn_signal(msg: Any, receive_ns: int) -> tuple[int, int]:
    """``TurnIndicatorsCommand`` → (command value, stamp in ns; the receive time where the stamp is zero)."""
    stamp_ns = int(msg.stamp.sec) * NS_PER_S + int(msg.stamp.nanosec)
    return int(msg.command), stamp_ns or int(receive_ns)
