"""The live view: a Foxglove WebSocket server in our own process (:class:`LiveView`, ``foxglove-sdk``).

The planning thread calls :meth:`LiveView.submit` with each instant's :class:`~.scene.PlanUpdate`: it stores a
reference in a one-slot mailbox and wakes the viewer's thread (microseconds; an update not yet drawn is
replaced, never queued). The viewer's thread encodes the channels (Foxglove's well-known schemas, protobuf;
JSON for the info and diagnostics) and hands them to the SDK, whose server keeps a bounded backlog per client
(``message_backlog``; the oldest message is dropped when a client is slow). Nothing is encoded while no client
subscribes. The server has no authentication: it binds to ``127.0.0.1`` unless told otherwise.

Channels (every timestamp is the plan's image stamp): :data:`TOPICS`.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wam_diff2_ros.core.camera import optical_rotation
from wam_diff2_ros.viewer.ports import wait_until_released

from .scene import STATUS_COLORS, PlanUpdate, ViewFrame, view_frame

BASE_FRAME = "base_link"
#: Topic of each channel (schema in brackets).
TOPICS = {
    "image": "/wam_diff2/camera/front/compressed",  # foxglove.CompressedImage (JPEG)
    "calibration": "/wam_diff2/camera/front/calibration",  # foxglove.CameraCalibration (with debug.camera_pose)
    "plan": "/wam_diff2/plan",  # foxglove.SceneUpdate in base_link
    "plan_fixed": "/wam_diff2/plan_fixed",  # foxglove.SceneUpdate in the odometry's frame, with the ego path
    "tf": "/tf",  # foxglove.FrameTransforms: fixed frame → base_link (→ camera)
    "info": "/wam_diff2/plan_info",  # JSON: command, speed, status, reason, confidence, timings, decode steps
    "diagnostics": "/wam_diff2/diagnostics",  # JSON: counts, drops, the latest problem
    "log": "/wam_diff2/log",  # foxglove.Log: rejected, stale and blocked instants
}
CameraPose = tuple[float, float, float, float, float, float]
#: The drawing thread's nice value (19: runs only on CPU time nothing else wants).
VIEWER_NICE = 19
#: After a client's first subscription, how long no further one must arrive before a replay starts.
SUBSCRIBE_SETTLE_S = 0.5


class ViewerUnavailableError(RuntimeError):
    """The ``foxglove-sdk`` package is missing or the server cannot start (port in use ...)."""


@dataclass(frozen=True)
class ViewerSettings:
    """Where to serve and how much to send."""

    port: int
    host: str = "127.0.0.1"
    image_max_hz: float = 5.0  # JPEG re-encodes per second at most (wall clock)
    image_max_width: int = 640  # wider frames are scaled down before encoding
    jpeg_quality: int = 80
    ego_path_points: int = 600  # recent ego positions drawn as the path
    message_backlog: int = 64  # per client, in the SDK's server (oldest dropped when full)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"viewer port must be 0..65535, got {self.port}")
        if not self.host:
            raise ValueError("viewer host must not be empty")


def _require_foxglove() -> Any:
    try:
        import foxglove
    except ImportError as exc:
        raise ViewerUnavailableError(
            f"the live view needs the foxglove-sdk package (pip install 'wam_diff2_ros[viewer]'): {exc}"
        ) from None
    return foxglove


def _stamp(ns: int) -> Any:
    from foxglove.messages import Timestamp

    return Timestamp(sec=int(ns // 1_000_000_000), nsec=int(ns % 1_000_000_000))


def _color(rgba: tuple[float, float, float, float]) -> Any:
    from foxglove.messages import Color

    r, g, b, a = rgba
    return Color(r=r, g=g, b=b, a=a)


def _line_strip(
    points: Sequence[tuple[float, float]], z: float, thickness: float, color: Any = None, colors: Any = None
) -> Any:
    """A Foxglove line strip through ``points`` at height ``z`` (one colour, or one per point)."""
    from foxglove.messages import LinePrimitive, LinePrimitiveLineType, Point3, Pose, Quaternion, Vector3

    return LinePrimitive(
        type=LinePrimitiveLineType.LineStrip,
        pose=Pose(position=Vector3(x=0.0, y=0.0, z=0.0), orientation=Quaternion(x=0.0, y=0.0, z=0.0, w=1.0)),
        thickness=thickness,
        points=[Point3(x=x, y=y, z=z) for x, y in points],
        color=color,
        colors=colors or [],
    )


def _lower_priority() -> None:
    """Make the calling thread the scheduler's last choice (Linux: a thread's nice value is its own), so that
    JPEG encoding never takes a core from planning; elsewhere nothing changes."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), VIEWER_NICE)


class _Subscriptions:
    """Counts client subscriptions (a ``foxglove.ServerListener``; the SDK calls it from its own threads)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.topics: dict[str, int] = {}
        self.first = threading.Event()

    def on_subscribe(self, client: Any, channel: Any) -> None:
        with self._changed:
            self.topics[channel.topic] = self.topics.get(channel.topic, 0) + 1
            self._changed.notify_all()
        self.first.set()

    def on_unsubscribe(self, client: Any, channel: Any) -> None:
        with self._changed:
            self.topics[channel.topic] = max(0, self.topics.get(channel.topic, 0) - 1)
            self._changed.notify_all()

    def wants(self, topic: str) -> bool:
        with self._changed:
            return self.topics.get(topic, 0) > 0

    def wait_for(self, topics: Sequence[str], timeout_s: float | None) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: all(self.topics.get(t, 0) > 0 for t in topics), timeout_s)

    def settle(self, quiet_s: float) -> None:
        """Return once no subscription changed for ``quiet_s`` (a client subscribes channel by channel)."""
        with self._changed:
            while self._changed.wait(quiet_s):
                pass


class LiveView:
    """The Foxglove server and its drawing thread (see the module docstring)."""

    def __init__(
        self, settings: ViewerSettings, camera_pose: CameraPose | None = None, name: str = "wam_diff2"
    ) -> None:
        self.settings = settings
        self.camera_pose = camera_pose
        self.name = name
        self.port = 0
        self.submitted = 0
        self.drawn = 0
        self.dropped = 0  # updates replaced before the viewer's thread took them
        self.counts = dict.fromkeys(STATUS_COLORS, 0)
        self._mailbox: PlanUpdate | None = None
        self._wake = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self._context: Any = None
        self._channels: dict[str, Any] = {}
        self._subscriptions = _Subscriptions()
        self._ego_path: deque[tuple[str, float, float]] = deque(maxlen=settings.ego_path_points)
        self._last_image_wall = -math.inf
        self._last_problem = ""

    # ---- lifecycle

    def start(self) -> int:
        """Start the server and the drawing thread; returns the port (raises :class:`ViewerUnavailableError`)."""
        foxglove = _require_foxglove()
        from foxglove import channels

        context = foxglove.Context()
        self._context = context  # the channels and the server live as long as their context
        try:
            self._server = foxglove.start_server(
                name=self.name,
                host=self.settings.host,
                port=self.settings.port,
                context=context,
                server_listener=self._subscriptions,
                message_backlog_size=self.settings.message_backlog,
            )
        except Exception as exc:  # port in use, bad host
            raise ViewerUnavailableError(
                f"cannot serve the live view on {self.settings.host}:{self.settings.port}: {exc}"
            ) from None
        self.port = int(self._server.port)
        self._channels = {
            "image": channels.CompressedImageChannel(TOPICS["image"], context=context),
            "calibration": channels.CameraCalibrationChannel(TOPICS["calibration"], context=context),
            "plan": channels.SceneUpdateChannel(TOPICS["plan"], context=context),
            "plan_fixed": channels.SceneUpdateChannel(TOPICS["plan_fixed"], context=context),
            "tf": channels.FrameTransformsChannel(TOPICS["tf"], context=context),
            "info": foxglove.Channel(TOPICS["info"], schema=_INFO_SCHEMA, context=context),
            "diagnostics": foxglove.Channel(TOPICS["diagnostics"], schema=_DIAGNOSTICS_SCHEMA, context=context),
            "log": channels.LogChannel(TOPICS["log"], context=context),
        }
        self._thread = threading.Thread(target=self._run, name="wam_diff2_viewer", daemon=True)
        self._thread.start()
        return self.port

    @property
    def url(self) -> str:
        """``ws://host:port``."""
        return f"ws://{self.settings.host}:{self.port}"

    def wait_for_client(self, timeout_s: float | None = None, settle_s: float = SUBSCRIBE_SETTLE_S) -> bool:
        """Block until a client subscribes (True) or ``timeout_s`` passes (False); then until its other
        subscriptions have arrived (none for ``settle_s``)."""
        if not self._subscriptions.first.wait(timeout_s):
            return False
        self._subscriptions.settle(settle_s)
        return True

    def wait_for_subscribers(self, topics: Sequence[str], timeout_s: float | None = None) -> bool:
        """Block until every topic of ``topics`` has a subscriber (True) or ``timeout_s`` passes."""
        return self._subscriptions.wait_for(topics, timeout_s)

    def close(self) -> None:
        """Draw the update still pending, stop the thread and the server, return once its port is free
        (idempotent)."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        if self._server is not None:
            self._server.stop()  # returns before the listener is closed: wait for that, so the port is free
            self._server = None
            wait_until_released(self.settings.host, self.port)

    # ---- the planning thread

    def submit(self, update: PlanUpdate) -> None:
        """Hand one instant to the viewer (never blocks on a client; replaces an update not yet drawn)."""
        with self._wake:
            if self._mailbox is not None:
                self.dropped += 1
            self._mailbox = update
            self.submitted += 1
            self._wake.notify()

    # ---- the viewer's thread

    def _run(self) -> None:
        _lower_priority()
        while True:
            with self._wake:
                while self._mailbox is None and not self._closed:
                    self._wake.wait()
                if self._mailbox is None:  # closed, and the last update is drawn
                    return
                update, self._mailbox = self._mailbox, None
            try:
                self._draw(update)
            except Exception as exc:  # a drawing bug must never reach planning
                self._last_problem = f"viewer: {type(exc).__name__}: {exc}"

    def _wants(self, name: str) -> bool:
        return self._subscriptions.wants(TOPICS[name])

    def _draw(self, update: PlanUpdate) -> None:
        frame = view_frame(update)
        self.counts[frame.status] += 1
        self.drawn += 1
        if frame.ego_pose is not None:
            self._ego_path.append((frame.fixed_frame, frame.ego_pose[0], frame.ego_pose[1]))
        if frame.status != "valid":
            self._last_problem = f"{frame.status}: {frame.reason}"
        t = frame.stamp_ns
        if (frame.ego_pose is not None or self.camera_pose is not None) and self._wants("tf"):
            self._channels["tf"].log(self._transforms(frame), log_time=t)
        if self._wants("plan"):
            self._channels["plan"].log(self._scene(frame, BASE_FRAME, frame.waypoints, fixed=False), log_time=t)
        if frame.fixed_frame and self._wants("plan_fixed"):
            scene = self._scene(frame, frame.fixed_frame, frame.waypoints_fixed, fixed=True)
            self._channels["plan_fixed"].log(scene, log_time=t)
        if self._wants("info"):
            self._channels["info"].log({"stamp_ns": t, **frame.info}, log_time=t)
        if self._wants("diagnostics"):
            self._channels["diagnostics"].log(self._diagnostics(), log_time=t)
        if frame.status != "valid" and self._wants("log"):
            from foxglove.messages import Log, LogLevel

            level = LogLevel.Warning if frame.status != "blocked" else LogLevel.Info
            self._channels["log"].log(
                Log(timestamp=_stamp(t), level=level, message=f"{frame.status}: {frame.reason}", name=self.name),
                log_time=t,
            )
        if update.result is not None and (self._wants("image") or self._wants("calibration")):
            self._image(update, t)

    def _diagnostics(self) -> dict[str, Any]:
        latest = self._last_problem
        level = "OK" if not latest else "WARN"
        return {
            "level": level,
            "message": latest or "planning",
            "submitted": self.submitted,
            "drawn": self.drawn,
            "dropped_updates": self.dropped,
            **{f"num_{status}": count for status, count in self.counts.items()},
        }

    def _transforms(self, frame: ViewFrame) -> Any:
        from foxglove.messages import FrameTransform, FrameTransforms, Quaternion, Vector3

        transforms = []
        stamp = _stamp(frame.stamp_ns)
        if frame.ego_pose is not None:
            x, y, yaw = frame.ego_pose
            transforms.append(
                FrameTransform(
                    timestamp=stamp,
                    parent_frame_id=frame.fixed_frame,
                    child_frame_id=BASE_FRAME,
                    translation=Vector3(x=x, y=y, z=0.0),
                    rotation=Quaternion(x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2)),
                )
            )
        if self.camera_pose is not None and frame.info.get("camera_frame"):
            cx, cy, cz, roll, pitch, yaw = self.camera_pose
            qx, qy, qz, qw = optical_rotation(roll, pitch, yaw)
            transforms.append(
                FrameTransform(
                    timestamp=stamp,
                    parent_frame_id=BASE_FRAME,
                    child_frame_id=frame.info["camera_frame"],
                    translation=Vector3(x=cx, y=cy, z=cz),
                    rotation=Quaternion(x=qx, y=qy, z=qz, w=qw),
                )
            )
        return FrameTransforms(transforms=transforms)

    def _scene(self, frame: ViewFrame, frame_id: str, points: Sequence[tuple[float, float]], fixed: bool) -> Any:
        from foxglove.messages import (
            Pose,
            Quaternion,
            SceneEntity,
            SceneUpdate,
            SpherePrimitive,
            TextPrimitive,
            Vector3,
        )

        stamp = _stamp(frame.stamp_ns)
        identity = Quaternion(x=0.0, y=0.0, z=0.0, w=1.0)
        status_color = _color(STATUS_COLORS[frame.status])
        origin = (frame.ego_pose[0], frame.ego_pose[1]) if fixed and frame.ego_pose is not None else (0.0, 0.0)
        lines, spheres, texts = [], [], []
        if points:
            colors = [_color(c) for c in frame.colors]
            lines.append(_line_strip([origin, *points], 0.05, 0.25, colors=[colors[0], *colors]))
            spheres.extend(
                SpherePrimitive(
                    pose=Pose(position=Vector3(x=x, y=y, z=0.1), orientation=identity),
                    size=Vector3(x=0.6, y=0.6, z=0.6),
                    color=color,
                )
                for (x, y), color in zip(points, colors, strict=True)
            )
        if not points or frame.status == "rejected":
            texts.append(
                TextPrimitive(
                    pose=Pose(position=Vector3(x=origin[0], y=origin[1], z=2.0), orientation=identity),
                    billboard=True,
                    font_size=14.0,
                    scale_invariant=True,
                    color=status_color,
                    text=f"{frame.status}: {frame.reason}"[:160],
                )
            )
        if not points:
            spheres.append(
                SpherePrimitive(
                    pose=Pose(position=Vector3(x=origin[0], y=origin[1], z=0.1), orientation=identity),
                    size=Vector3(x=1.5, y=1.5, z=0.2),
                    color=status_color,
                )
            )
        entity = SceneEntity(
            timestamp=stamp,
            frame_id=frame_id,
            id="plan",
            frame_locked=not fixed,
            lines=lines,
            spheres=spheres,
            texts=texts,
        )
        entities = [entity]
        if frame.candidates:  # the unpublished candidates of a batch, faint
            entities.append(
                SceneEntity(
                    timestamp=stamp,
                    frame_id=frame_id,
                    id="candidates",
                    frame_locked=not fixed,
                    lines=[
                        _line_strip([origin, *(c.points_fixed if fixed else c.points)], 0.03, 0.12, _color(c.color))
                        for c in frame.candidates
                        if (c.points_fixed if fixed else c.points)
                    ],
                )
            )
        if fixed:
            path = [(x, y) for f, x, y in self._ego_path if f == frame_id]
            if len(path) >= 2:
                entities.append(
                    SceneEntity(
                        timestamp=stamp,
                        frame_id=frame_id,
                        id="ego_path",
                        lines=[_line_strip(path, 0.02, 0.15, _color((0.3, 0.55, 1.0, 1.0)))],
                    )
                )
        return SceneUpdate(entities=entities)

    def _image(self, update: PlanUpdate, t: int) -> None:
        """The front image as JPEG (at most ``image_max_hz``) and its calibration."""
        now = time.monotonic()
        if now - self._last_image_wall < 1.0 / self.settings.image_max_hz:
            return
        self._last_image_wall = now
        import cv2
        from foxglove.messages import CameraCalibration, CompressedImage

        assert update.result is not None
        front = update.result.observation.front
        rgb = np.asarray(front.image)
        height, width = rgb.shape[:2]
        if width > self.settings.image_max_width:
            scale = self.settings.image_max_width / width
            width, height = self.settings.image_max_width, max(1, round(height * scale))
            rgb = cv2.resize(rgb, (width, height), interpolation=cv2.INTER_AREA)
        ok, jpeg = cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, self.settings.jpeg_quality])
        if not ok:
            return
        frame_id = front.frame_id or f"{front.camera}_optical"
        stamp = _stamp(t)
        self._channels["image"].log(
            CompressedImage(timestamp=stamp, frame_id=frame_id, data=jpeg.tobytes(), format="jpeg"), log_time=t
        )
        k = front.intrinsics.scaled_to(width, height) if front.intrinsics is not None else None
        if k is not None:
            self._channels["calibration"].log(
                CameraCalibration(
                    timestamp=stamp,
                    frame_id=frame_id,
                    width=width,
                    height=height,
                    distortion_model="plumb_bob",
                    D=[0.0] * 5,
                    K=[k.fx, 0.0, k.cx, 0.0, k.fy, k.cy, 0.0, 0.0, 1.0],
                    R=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                    P=[k.fx, 0.0, k.cx, 0.0, 0.0, k.fy, k.cy, 0.0, 0.0, 0.0, 1.0, 0.0],
                ),
                log_time=t,
            )


_INFO_SCHEMA = {
    "type": "object",
    "properties": {
        "stamp_ns": {"type": "integer"},
        "status": {"type": "string", "enum": list(STATUS_COLORS)},
        "valid": {"type": "boolean"},
        "reason": {"type": "string"},
        "command": {"type": "string"},
        "speed_mps": {"type": "number"},
        "confidence": {"type": ["number", "null"]},
        "waypoint_confidence": {"type": "array", "items": {"type": "number"}},
        "waypoints": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "timing": {"type": "object", "additionalProperties": {"type": "number"}},
        "steps_per_block": {"type": "array", "items": {"type": "integer"}},
        "decode_steps": {"type": "integer"},
    },
}
_DIAGNOSTICS_SCHEMA = {
    "type": "object",
    "properties": {
        "level": {"type": "string", "enum": ["OK", "WARN"]},
        "message": {"type": "string"},
        "submitted": {"type": "integer"},
        "drawn": {"type": "integer"},
        "dropped_updates": {"type": "integer"},
    },
}
