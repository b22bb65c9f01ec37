"""The route input (``command.source: route``): a ``nav_msgs/Path`` of the route's centre line on
``~/input/route`` → the held navigation command by the route rule (``core/route_command.py``).

Frames: the Path must be in ``base_link`` or in the odometry's frame (``header.frame_id`` of ``nav_msgs/Odometry``);
anything else is refused (the command cannot be judged from a route whose frame the node cannot place).

* A ``base_link`` route is read as given: it is the route as the ego saw it at the Path's stamp, and gives one
  command at that stamp (a bridge that publishes the route in the rig frame, as AlpaSim's ``submit_route``, sends a
  new one each cycle); it replaces a kept fixed-frame route.
* A route in the odometry's frame is put into the ego frame at the **latest ego pose** (not at the Path's stamp: a
  map route is the same wherever the ego is, and it is where the ego is now that decides the command), and kept:
  every later odometry message evaluates it again at its pose, so a route published once (latched, as a mission
  route is) keeps the command fresh while the car drives along it. Before any odometry it waits for the first.

The command is held by :class:`~wam_diff2_ros.core.turn_signal.CommandHold` (``command.turn_signal_hold_s``), as
the turn-signal source's is: a turn at once, straight only once it has lasted the hold time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wam_diff2_ros.core.frames import EgoPose
from wam_diff2_ros.core.route_command import RouteError, RouteRule, route_command, route_points, to_ego_frame
from wam_diff2_ros.core.samples import CommandSample, InputError
from wam_diff2_ros.core.turn_signal import CommandHold

from .conversions import stamp_to_ns

BASE_FRAME = "base_link"


def path_route(msg: Any, receive_ns: int) -> tuple[str, int, np.ndarray]:
    """``(frame_id, stamp_ns, points)`` of a ``nav_msgs/Path`` (a zero stamp means the receive time);
    :class:`InputError` for fewer than two poses or a coordinate that is not finite."""
    frame_id = str(msg.header.frame_id)
    stamp_ns = stamp_to_ns(msg.header.stamp) or int(receive_ns)
    raw = [(float(p.pose.position.x), float(p.pose.position.y)) for p in msg.poses]
    try:
        points = route_points(np.array(raw, dtype=np.float64).reshape(-1, 2))
    except RouteError as exc:
        raise InputError(f"route: {exc}") from None
    return frame_id, stamp_ns, points


class RouteSource:
    """The route's command: the rule, the hold, the latest ego pose, and a route in the odometry's frame kept for
    later poses (see the module docstring)."""

    def __init__(self, lookahead_m: float, lateral_threshold_m: float, hold_s: float) -> None:
        self.rule = RouteRule(lookahead_m, lateral_threshold_m)
        self.hold = CommandHold(hold_s)
        self._fixed: tuple[str, np.ndarray] | None = None  # frame, points
        self._pose: tuple[EgoPose | None, int] | None = None  # the newest odometry's pose and stamp

    def configure(self, lookahead_m: float, lateral_threshold_m: float, hold_s: float) -> None:
        """New parameters from the next message on (a live parameter change)."""
        self.rule, self.hold.hold_s = RouteRule(lookahead_m, lateral_threshold_m), hold_s

    def on_path(self, msg: Any, receive_ns: int) -> CommandSample | None:
        """A Path arrived; the command now held (None while a fixed-frame route waits for the first odometry).
        :class:`InputError` for a bad Path, which changes nothing."""
        frame_id, stamp_ns, points = path_route(msg, receive_ns)
        if frame_id == BASE_FRAME:
            self._fixed = None
            return self._sample(points, stamp_ns, receive_ns)
        pose, pose_stamp_ns = self._pose or (None, 0)
        if not frame_id or (pose is not None and frame_id != pose.frame_id):
            odometry = repr(pose.frame_id) if pose is not None else "of the odometry"
            raise InputError(f"route in frame {frame_id!r}: it must be in {BASE_FRAME!r} or the frame {odometry}")
        self._fixed = (frame_id, points)
        if pose is None:
            return None
        return self._sample(to_ego_frame(points, pose), max(stamp_ns, pose_stamp_ns), receive_ns)

    def on_pose(self, pose: EgoPose | None, stamp_ns: int, receive_ns: int) -> CommandSample | None:
        """A new ego pose (odometry): the kept fixed-frame route's command there (None without one).
        :class:`InputError` when the odometry's frame is not the route's (the route is then dropped)."""
        if self._pose is not None and stamp_ns < self._pose[1]:
            return None  # an older odometry message: the command stays as the newer pose gave it
        self._pose = (pose, stamp_ns)
        if self._fixed is None or pose is None:
            return None
        frame_id, points = self._fixed
        if frame_id != pose.frame_id:
            self._fixed = None
            raise InputError(
                f"route in frame {frame_id!r} dropped: the odometry is in {pose.frame_id!r} (a route must be in "
                f"{BASE_FRAME!r} or the odometry's frame)"
            )
        return self._sample(to_ego_frame(points, pose), stamp_ns, receive_ns)

    def _sample(self, points_ego: np.ndarray, stamp_ns: int, receive_ns: int) -> CommandSample:
        command = self.hold.update_command(route_command(points_ego, self.rule), stamp_ns)
        return CommandSample(command, stamp_ns, int(receive_ns))

    def reset(self) -> None:
        """Forget the route, the pose and the held command."""
        self._fixed, self._pose = None, None
        self.hold.reset()
