"""Observations for the planner: the latest samples, checked for freshness and assembled (:class:`ObservationBuffer`).

ROS-free (no rclpy import); the node and the rosbag replay tool share it. The ROS layer converts each
incoming message into one of the sample types below (``ImageSample``, ``OdometrySample``,
``AccelerationSample``, ``CommandSample``, ``CameraIntrinsics``) and hands it to an
:class:`ObservationBuffer`; the planning worker calls :meth:`ObservationBuffer.assemble` with the
current time (node clock, or bag time in a replay) and gets either one :class:`Observation` or the
:class:`InputProblem` s that prevent one. Nothing is ever planned on data that fails a check.

Checks (all times in nanoseconds; limits from :class:`SyncConfig`):

* front image (camera 0): present and ``|now - stamp| <= max_image_age_ms``;
* every other camera: the stored frame nearest to the front stamp is within ``max_skew_ms`` of it;
* odometry: the sample nearest to the front stamp is within ``max_age_ms`` of it;
* acceleration: from an ``AccelWithCovarianceStamped`` sample within ``max_age_ms`` of the front stamp
  (``source`` ``topic``, or ``auto`` when one is fresh), otherwise derived from odometry with
  :func:`derive_acceleration` (``source`` ``odometry``, or ``auto`` without a fresh topic sample);
* command: the latest one; older than ``command_max_age_s`` (default 3 s, 0 = never expires) or missing
  means the configured default command, or no plan when there is no default.

The observation also carries the ego pose at the front stamp in the odometry's fixed frame
(:func:`~wam_diff2_ros.core.frames.pose_at`), for plans published in that frame.

The sample types live in :mod:`.samples`, camera geometry in :mod:`.camera`, the acceleration filter in
:mod:`.acceleration`.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .acceleration import ACCELERATION_SOURCES, AccelerationFilterConfig, derive_acceleration
from .camera import CameraFrame, CameraIntrinsics
from .frames import EgoPose, pose_at
from .prompts import NavigationCommand
from .samples import (
    AccelerationSample,
    CommandSample,
    ImageSample,
    InputError,
    InputProblem,
    OdometrySample,
)
from .units import NS_PER_MS, NS_PER_S

# A 1 Hz command topic may lose two messages before its command expires; a dead one expires within 3 s.
DEFAULT_COMMAND_MAX_AGE_S = 3.0


@dataclass(frozen=True)
class SyncConfig:
    """Freshness limits and input policies for :class:`ObservationBuffer` (see the module docstring)."""

    max_skew_ms: float = 50.0
    max_age_ms: float = 100.0
    max_image_age_ms: float = 500.0
    acceleration_source: str = "auto"
    command_max_age_s: float = DEFAULT_COMMAND_MAX_AGE_S
    default_command: NavigationCommand | None = None

    def __post_init__(self) -> None:
        for name in ("max_skew_ms", "max_age_ms", "max_image_age_ms"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"sync.{name} must be > 0, got {value}")
        if not (math.isfinite(self.command_max_age_s) and self.command_max_age_s >= 0):
            raise ValueError(f"command.max_age_s must be >= 0, got {self.command_max_age_s}")
        if self.acceleration_source not in ACCELERATION_SOURCES:
            raise ValueError(
                f"acceleration.source must be one of {', '.join(ACCELERATION_SOURCES)}, "
                f"got {self.acceleration_source!r}"
            )


@dataclass(frozen=True)
class Observation:
    """Everything one plan is made from; ``stamp_ns`` is the front image's stamp (the plan's stamp)."""

    stamp_ns: int
    frames: tuple[CameraFrame, ...]
    command: NavigationCommand
    command_source: str  # "topic" or "default"
    velocity: tuple[float, float]
    acceleration: tuple[float, float]
    acceleration_source: str  # "topic" or "odometry"
    odometry_stamp_ns: int
    acceleration_stamp_ns: int | None = None
    assembled_ns: int = 0  # the clock reading the checks used
    ego_pose: EgoPose | None = None  # base_link at ``stamp_ns`` in the odometry's frame (interpolated)
    ego_pose_problem: str = ""  # why ``ego_pose`` is None

    @property
    def front(self) -> CameraFrame:
        """The first (front) camera's frame."""
        return self.frames[0]

    @property
    def images(self) -> list[np.ndarray]:
        """The RGB arrays in prompt order (camera list order)."""
        return [f.image for f in self.frames]


@dataclass(frozen=True)
class AssemblyResult:
    """An observation, or the problems that prevent one (``idle``: nothing new to plan on, no problem)."""

    observation: Observation | None
    problems: tuple[InputProblem, ...] = ()
    idle: bool = False


def _ms(ns: int) -> float:
    return ns / NS_PER_MS


class ObservationBuffer:
    """The latest samples of every input (short histories), thread-safe; assembles observations.

    ``camera_names[0]`` is the front camera. ``image_history`` frames per camera are kept so a camera
    whose newest frame is a little ahead of the front one can still contribute its matching frame;
    odometry and acceleration keep ``history_s`` seconds. A sample whose stamp goes back by more than
    the history (a bag restarting, a sim clock reset) clears that input's history first.
    """

    def __init__(
        self,
        camera_names: Sequence[str],
        sync: SyncConfig | None = None,
        acceleration_filter: AccelerationFilterConfig | None = None,
        fallback_hfov_deg: float = 70.0,
        image_history: int = 4,
        history_s: float = 2.0,
    ) -> None:
        if not camera_names:
            raise ValueError("at least one camera is needed")
        self.camera_names = tuple(camera_names)
        self.sync = sync or SyncConfig()
        self.acceleration_filter = acceleration_filter or AccelerationFilterConfig()
        self.fallback_hfov_deg = fallback_hfov_deg
        self._history_ns = round(history_s * NS_PER_S)
        self._lock = threading.Lock()
        self._images: list[deque[ImageSample]] = [deque(maxlen=image_history) for _ in self.camera_names]
        self._intrinsics: list[CameraIntrinsics | None] = [None] * len(self.camera_names)
        self._odometry: list[OdometrySample] = []
        self._acceleration: list[AccelerationSample] = []
        self._command: CommandSample | None = None

    # ---- naming

    def input_name(self, index: int) -> str:
        """Diagnostic name of camera ``index``: ``image_<index> (<camera name>)``."""
        return f"image_{index} ({self.camera_names[index]})"

    # ---- storing

    def add_image(self, index: int, sample: ImageSample) -> None:
        """Store a frame of camera ``index`` (newest last; an older stamp than the newest clears the history
        when it jumps back by more than the history, else it is inserted in order)."""
        with self._lock:
            frames = self._images[index]
            if frames and sample.stamp_ns < frames[-1].stamp_ns - self._history_ns:
                frames.clear()
            if frames and sample.stamp_ns < frames[-1].stamp_ns:
                items = sorted([*frames, sample], key=lambda s: s.stamp_ns)
                frames.clear()
                frames.extend(items[-frames.maxlen :] if frames.maxlen else items)
            else:
                frames.append(sample)

    def set_intrinsics(self, index: int, intrinsics: CameraIntrinsics | None) -> None:
        """Store the CameraInfo intrinsics of camera ``index`` (None: use the fallback pinhole)."""
        with self._lock:
            self._intrinsics[index] = intrinsics

    def _insert(self, history: list[Any], sample: Any) -> None:
        if history and sample.stamp_ns < history[-1].stamp_ns - self._history_ns:
            history.clear()
        stamps = [s.stamp_ns for s in history]
        position = bisect.bisect_left(stamps, sample.stamp_ns)
        if position < len(history) and history[position].stamp_ns == sample.stamp_ns:
            history[position] = sample
        else:
            history.insert(position, sample)
        cutoff = history[-1].stamp_ns - self._history_ns
        while history and history[0].stamp_ns < cutoff:
            history.pop(0)

    def add_odometry(self, sample: OdometrySample) -> None:
        """Store an odometry sample (already checked finite by :class:`OdometrySample`)."""
        with self._lock:
            self._insert(self._odometry, sample)

    def add_acceleration(self, sample: AccelerationSample) -> None:
        """Store an acceleration sample."""
        with self._lock:
            self._insert(self._acceleration, sample)

    def add_command(self, sample: CommandSample) -> None:
        """Store the latest navigation command."""
        with self._lock:
            self._command = sample

    def clear(self) -> None:
        """Forget every stored sample (node deactivation, replay restart)."""
        with self._lock:
            for frames in self._images:
                frames.clear()
            self._intrinsics = [None] * len(self.camera_names)
            self._odometry.clear()
            self._acceleration.clear()
            self._command = None

    # ---- reading

    def latest_stamp(self, index: int = 0) -> int | None:
        """Stamp of the newest frame of camera ``index`` (None without one)."""
        with self._lock:
            frames = self._images[index]
            return frames[-1].stamp_ns if frames else None

    def input_ages_ms(self, now_ns: int) -> dict[str, float | None]:
        """Age (now − newest stamp, ms) of every input, None for inputs never received (for diagnostics)."""
        with self._lock:
            ages: dict[str, float | None] = {}
            for index, frames in enumerate(self._images):
                ages[self.input_name(index)] = _ms(now_ns - frames[-1].stamp_ns) if frames else None
            ages["odometry"] = _ms(now_ns - self._odometry[-1].stamp_ns) if self._odometry else None
            ages["acceleration"] = _ms(now_ns - self._acceleration[-1].stamp_ns) if self._acceleration else None
            ages["command"] = _ms(now_ns - self._command.stamp_ns) if self._command else None
            return ages

    def _decode(self, index: int, sample: ImageSample) -> CameraFrame:
        """Decode a stored frame; a frame that fails is removed so it is reported once, not retried."""
        try:
            image = sample.image.get()
        except InputError:
            with self._lock:
                frames = self._images[index]
                if sample in frames:
                    frames.remove(sample)
            raise
        height, width = int(image.shape[0]), int(image.shape[1])
        with self._lock:
            intrinsics = self._intrinsics[index]
        if intrinsics is None:
            intrinsics = CameraIntrinsics.pinhole_fallback(width, height, self.fallback_hfov_deg)
        else:
            intrinsics = intrinsics.scaled_to(width, height)
        return CameraFrame(
            camera=self.camera_names[index],
            index=index,
            stamp_ns=sample.stamp_ns,
            receive_ns=sample.receive_ns,
            frame_id=sample.frame_id,
            image=image,
            intrinsics=intrinsics,
        )

    def _front_problem(self, front: ImageSample | None, now_ns: int) -> InputProblem | None:
        name = self.input_name(0)
        if front is None:
            return InputProblem(name, "no image received")
        age_ns = now_ns - front.stamp_ns
        limit = self.sync.max_image_age_ms
        if _ms(age_ns) > limit:
            return InputProblem(name, f"newest image is {_ms(age_ns):.0f} ms old (limit {limit:g} ms)")
        if _ms(-age_ns) > limit:
            return InputProblem(name, f"newest image stamp is {_ms(-age_ns):.0f} ms in the future (limit {limit:g} ms)")
        return None

    def latest_frames(self, indices: Sequence[int], now_ns: int) -> tuple[list[CameraFrame], list[InputProblem]]:
        """Decoded newest frames of the given cameras that are at most ``max_image_age_ms`` old (for
        detection and VQA); problems for the others."""
        frames: list[CameraFrame] = []
        problems: list[InputProblem] = []
        for index in indices:
            with self._lock:
                stored = self._images[index]
                sample = stored[-1] if stored else None
            name = self.input_name(index)
            if sample is None:
                problems.append(InputProblem(name, "no image received"))
                continue
            age_ms = _ms(now_ns - sample.stamp_ns)
            if abs(age_ms) > self.sync.max_image_age_ms:
                problems.append(
                    InputProblem(name, f"newest image is {age_ms:.0f} ms old (limit {self.sync.max_image_age_ms:g} ms)")
                )
                continue
            try:
                frames.append(self._decode(index, sample))
            except InputError as exc:
                problems.append(InputProblem(name, f"image dropped: {exc}"))
        return frames, problems

    def assemble(
        self, now_ns: int, after_stamp_ns: int | None = None, cameras: Sequence[int] | None = None
    ) -> AssemblyResult:
        """One observation at ``now_ns`` (see the module docstring), or the problems preventing it.

        With ``after_stamp_ns`` (the stamp of the last planned front frame) a front frame that is not newer
        gives an ``idle`` result without problems, as long as it is still fresh; one older by more than the
        history (a bag loop, a simulation reset) counts as new. ``cameras`` (indices, the front camera 0 first;
        default all) are the cameras whose frames the observation holds, in that order; the others are not
        waited for.
        """
        indices = list(range(len(self._images))) if cameras is None else list(cameras)
        if not indices or indices[0] != 0 or len(set(indices)) != len(indices):
            raise ValueError(f"cameras must be distinct indices starting with the front camera 0, got {indices}")
        with self._lock:
            front = self._images[0][-1] if self._images[0] else None
            others = [(index, list(self._images[index])) for index in indices[1:]]
            odometry = list(self._odometry)
            accelerations = list(self._acceleration)
            command_sample = self._command

        problem = self._front_problem(front, now_ns)
        if problem is not None:
            return AssemblyResult(None, (problem,))
        assert front is not None
        if after_stamp_ns is not None and after_stamp_ns - self._history_ns <= front.stamp_ns <= after_stamp_ns:
            return AssemblyResult(None, (), idle=True)  # already planned on (a far older stamp: time went back)
        stamp = front.stamp_ns
        problems: list[InputProblem] = []

        # Other cameras: the stored frame nearest to the front stamp.
        chosen: list[tuple[int, ImageSample]] = [(0, front)]
        for index, frames in others:
            name = self.input_name(index)
            if not frames:
                problems.append(InputProblem(name, "no image received"))
                continue
            nearest = min(frames, key=lambda s: abs(s.stamp_ns - stamp))
            skew = _ms(nearest.stamp_ns - stamp)
            if abs(skew) > self.sync.max_skew_ms:
                problems.append(
                    InputProblem(
                        name,
                        f"nearest image is {skew:+.0f} ms from the front image (limit ±{self.sync.max_skew_ms:g} ms)",
                    )
                )
                continue
            chosen.append((index, nearest))

        # Odometry: nearest sample to the front stamp.
        odometry_sample: OdometrySample | None = None
        if not odometry:
            problems.append(InputProblem("odometry", "no odometry received"))
        else:
            odometry_sample = min(odometry, key=lambda s: abs(s.stamp_ns - stamp))
            offset_ms = _ms(odometry_sample.stamp_ns - stamp)
            if abs(offset_ms) > self.sync.max_age_ms:
                problems.append(
                    InputProblem(
                        "odometry",
                        f"nearest odometry is {offset_ms:+.0f} ms from the front image "
                        f"(limit ±{self.sync.max_age_ms:g} ms)",
                    )
                )
                odometry_sample = None

        acceleration, acceleration_source, acceleration_stamp, accel_problem = self._acceleration_for(
            stamp, odometry, odometry_sample, accelerations
        )
        if accel_problem is not None:
            problems.append(accel_problem)

        command, command_source, command_problem = self._command_for(now_ns, command_sample)
        if command_problem is not None:
            problems.append(command_problem)

        if problems:
            return AssemblyResult(None, tuple(problems))

        frames_out: list[CameraFrame] = []
        for index, sample in chosen:
            try:
                frames_out.append(self._decode(index, sample))
            except InputError as exc:
                problems.append(InputProblem(self.input_name(index), f"image dropped: {exc}"))
        if problems:
            return AssemblyResult(None, tuple(problems))
        assert odometry_sample is not None and acceleration is not None and command is not None
        pose, pose_problem = pose_at(odometry, stamp, round(self.sync.max_age_ms * NS_PER_MS))
        observation = Observation(
            stamp_ns=stamp,
            frames=tuple(frames_out),
            command=command,
            command_source=command_source,
            velocity=(odometry_sample.vx, odometry_sample.vy),
            acceleration=acceleration,
            acceleration_source=acceleration_source,
            odometry_stamp_ns=odometry_sample.stamp_ns,
            acceleration_stamp_ns=acceleration_stamp,
            assembled_ns=now_ns,
            ego_pose=pose,
            ego_pose_problem=pose_problem,
        )
        return AssemblyResult(observation)

    def _acceleration_for(
        self,
        stamp: int,
        odometry: list[OdometrySample],
        odometry_sample: OdometrySample | None,
        accelerations: list[AccelerationSample],
    ) -> tuple[tuple[float, float] | None, str, int | None, InputProblem | None]:
        source = self.sync.acceleration_source
        topic_problem: str | None = None
        if source in ("auto", "topic"):
            if accelerations:
                nearest = min(accelerations, key=lambda s: abs(s.stamp_ns - stamp))
                offset_ms = _ms(nearest.stamp_ns - stamp)
                if abs(offset_ms) <= self.sync.max_age_ms:
                    return (nearest.ax, nearest.ay), "topic", nearest.stamp_ns, None
                topic_problem = (
                    f"nearest acceleration is {offset_ms:+.0f} ms from the front image "
                    f"(limit ±{self.sync.max_age_ms:g} ms)"
                )
            else:
                topic_problem = "no acceleration received"
            if source == "topic":
                return None, "topic", None, InputProblem("acceleration", topic_problem)
        if odometry_sample is None:
            # The odometry problem is already reported; deriving needs a usable odometry sample.
            return None, "odometry", None, None
        try:
            derived = derive_acceleration(odometry, odometry_sample.stamp_ns, self.acceleration_filter)
        except InputError as exc:
            return None, "odometry", None, InputProblem("acceleration", str(exc))
        return derived, "odometry", None, None

    def _command_for(
        self, now_ns: int, sample: CommandSample | None
    ) -> tuple[NavigationCommand | None, str, InputProblem | None]:
        default = self.sync.default_command
        hint = "" if default is not None else " (set command.default to plan without one)"
        if sample is None:
            if default is not None:
                return default, "default", None
            return None, "", InputProblem("command", "no navigation command received" + hint)
        max_age = self.sync.command_max_age_s
        age_s = (now_ns - sample.stamp_ns) / NS_PER_S
        if max_age > 0 and age_s > max_age:
            if default is not None:
                return default, "default", None
            return None, "", InputProblem("command", f"latest command is {age_s:.1f} s old (limit {max_age:g} s){hint}")
        return sample.command, "topic", None
