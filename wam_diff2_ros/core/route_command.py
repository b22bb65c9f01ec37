"""The navigation command from a route polyline (``command.source: route``; the egodriver's ``submit_route``).

AlpaSim's drivers derive the left / straight / right command from the route they are given, in the rig frame
(x forward, y left): the first route point at least ``lookahead_m`` from the ego is the target; it asks for
``left`` when its lateral offset is more than ``lateral_threshold_m`` to the left, ``right`` when more than that to
the right, ``straight`` otherwise, and also ``straight`` when no point is that far (the route ends sooner).
The defaults here are this package's: 20 m ahead, 3 m aside (AlpaSim's code defaults are 5 m and 2 m; both are
parameters). The result is held like the turn signal (``core/turn_signal.py`` :class:`CommandHold`): a turn at
once, straight only once it has lasted the hold time.

A route needs at least two finite points; anything less is refused (:class:`RouteError`), so a damaged route
never silently becomes ``straight``. This module has no ROS imports: the node (``nav_msgs/Path`` on the
``route`` input) and the egodriver policy both call :func:`route_command`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .frames import EgoPose
from .prompts import NavigationCommand

DEFAULT_LOOKAHEAD_M = 20.0
DEFAULT_LATERAL_THRESHOLD_M = 3.0


class RouteError(ValueError):
    """A route that cannot give a command (fewer than two finite points, bad parameters)."""


@dataclass(frozen=True)
class RouteRule:
    """The rule's two parameters (see the module docstring)."""

    lookahead_m: float = DEFAULT_LOOKAHEAD_M
    lateral_threshold_m: float = DEFAULT_LATERAL_THRESHOLD_M

    def __post_init__(self) -> None:
        for name in ("lookahead_m", "lateral_threshold_m"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise RouteError(f"{name} must be a finite number >= 0, got {value!r}")


def route_points(points: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """``points`` as an (N, 2) float array of x, y; :class:`RouteError` unless there are at least two points and
    every coordinate is finite."""
    try:
        array = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise RouteError(f"route points are not numbers: {exc}") from None
    if array.ndim != 2 or array.shape[1] < 2:
        raise RouteError(f"route points must be rows of x, y; got an array of shape {array.shape}")
    array = array[:, :2]
    if len(array) < 2:
        raise RouteError(f"a route needs at least 2 points, got {len(array)}")
    if not np.isfinite(array).all():
        raise RouteError("the route has a point that is not finite")
    return array


def to_ego_frame(points: np.ndarray, pose: EgoPose) -> np.ndarray:
    """Route points given in ``pose.frame_id`` (N, 2) expressed in the ego's frame at ``pose`` (x fwd, y left)."""
    cos_yaw, sin_yaw = math.cos(pose.yaw), math.sin(pose.yaw)
    dx, dy = points[:, 0] - pose.x, points[:, 1] - pose.y
    return np.stack([cos_yaw * dx + sin_yaw * dy, -sin_yaw * dx + cos_yaw * dy], axis=1)


def route_command(
    points_ego: Sequence[Sequence[float]] | np.ndarray, rule: RouteRule | None = None
) -> NavigationCommand:
    """The command a route asks for; ``points_ego`` in the ego (rig) frame, x forward, y left (module docstring)."""
    rule = rule or RouteRule()
    points = route_points(points_ego)
    distances = np.hypot(points[:, 0], points[:, 1])
    ahead = np.flatnonzero(distances >= rule.lookahead_m)
    if len(ahead) == 0:
        return NavigationCommand.STRAIGHT
    lateral = float(points[ahead[0], 1])
    if lateral > rule.lateral_threshold_m:
        return NavigationCommand.LEFT
    if lateral < -rule.lateral_threshold_m:
        return NavigationCommand.RIGHT
    return NavigationCommand.STRAIGHT
