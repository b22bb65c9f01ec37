"""Planning samples taken from simulated drives (:mod:`wam_diff2_ros.sim`): the frame the camera sees at an
instant, the telemetry the bag carries then (speed, longitudinal and lateral acceleration), the navigation
command in force, and the ego's true future 0.5 .. 4 s later in the ego frame at that instant: exactly what a
replay of a sample bag asks the model and measures it against. Each frame also serves mirrored (image flipped,
y negated, ``left`` ↔ ``right``), so right turns are as common as left ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from wam_diff2_ros.core.prompts import format_number
from wam_diff2_ros.demo.train.config import DRIVE_SECONDS, IMAGE_SIZES, NUM_WAYPOINTS, WAYPOINT_DT
from wam_diff2_ros.demo.train.data import DrivingSample, ImagePool

if TYPE_CHECKING:
    from wam_diff2_ros.sim import DriveTrack

MIRRORED_COMMAND = {"left": "right", "right": "left", "straight": "straight", "unknown": "unknown"}
TURN_SHARE = 0.6  # share of a drive's frames drawn around its left turn (the hard part), the rest anywhere


def drive_times(track: DriveTrack, count: int, rng: np.random.Generator) -> list[float]:
    """`count` instants (s from the drive's start): `TURN_SHARE` of them from 2 s before the ``left`` command
    until 1.5 s after the turn, the rest uniformly over the drive."""
    start_ns = track.start_ns
    entry = (track.turn_entry_ns - start_ns) / 1e9
    leave = (track.turn_exit_ns - start_ns) / 1e9
    turning = round(count * TURN_SHARE)
    near = rng.uniform(max(0.2, entry - 5.0), min(DRIVE_SECONDS - 0.2, leave + 1.5), turning)
    anywhere = rng.uniform(0.2, DRIVE_SECONDS - 0.2, count - turning)
    return sorted(float(t) for t in np.concatenate([near, anywhere]))


def future_in_ego_frame(track: DriveTrack, stamp_ns: int) -> np.ndarray:
    """The ego's (x, y) at `stamp_ns` + 0.5 .. 4 s, in the ego frame at `stamp_ns` (8 x 2, metres)."""
    x0, y0, yaw0 = track.pose_at(stamp_ns)
    cos, sin = math.cos(yaw0), math.sin(yaw0)
    points = []
    for k in range(1, NUM_WAYPOINTS + 1):
        x, y, _ = track.pose_at(stamp_ns + round(k * WAYPOINT_DT * 1e9))
        dx, dy = x - x0, y - y0
        points.append((cos * dx + sin * dy, -sin * dx + cos * dy))
    return np.asarray(points)


def _rounded(points: np.ndarray) -> tuple[tuple[float, float], ...]:
    return tuple((float(format_number(float(x))), float(format_number(float(y)))) for x, y in points)


def drive_samples(
    drive_seeds: Sequence[int], frames_per_drive: int, seed: int, sizes: Sequence[tuple[int, int]] = IMAGE_SIZES
) -> tuple[ImagePool, list[DrivingSample]]:
    """Render `frames_per_drive` instants of each drive (and their mirror images) and the samples that go with
    them; frame ``i`` of drive ``d`` has size ``sizes[(d + i) % n]``. The pool's ``by_command`` lists each
    image under the command of its sample."""
    from wam_diff2_ros.sim import render_frames, simulate_drive

    rng = np.random.default_rng(seed)
    images: list[np.ndarray] = []
    samples: list[DrivingSample] = []
    by_command: dict[str, list[int]] = {name: [] for name in MIRRORED_COMMAND}
    for d, drive_seed in enumerate(drive_seeds):
        track = simulate_drive(DRIVE_SECONDS, drive_seed)
        times = drive_times(track, frames_per_drive, rng)
        frame_sizes = [sizes[(d + i) % len(sizes)] for i in range(len(times))]
        frames: list[np.ndarray] = [np.zeros(0, dtype=np.uint8)] * len(times)
        for size in dict.fromkeys(frame_sizes):
            members = [i for i, s in enumerate(frame_sizes) if s == size]
            rendered = render_frames(DRIVE_SECONDS, drive_seed, *size, [times[i] for i in members])
            for i, frame in zip(members, rendered, strict=True):
                frames[i] = frame
        stamps = track.stamps_ns
        for t, frame in zip(times, frames, strict=True):
            stamp_ns = track.start_ns + round(t * 1e9)
            speed = float(np.interp(stamp_ns, stamps, track.speed))
            accel = [float(np.interp(stamp_ns, stamps, a)) for a in (track.accel_x, track.accel_y)]
            command = track.command_at(stamp_ns)
            future = future_in_ego_frame(track, stamp_ns)
            for mirrored in (False, True):
                sign = -1.0 if mirrored else 1.0
                name = MIRRORED_COMMAND[command] if mirrored else command
                by_command[name].append(len(images))
                images.append(np.ascontiguousarray(frame[:, ::-1]) if mirrored else frame)
                samples.append(
                    DrivingSample(
                        command=name,
                        velocity=(speed, 0.0),
                        acceleration=(accel[0], sign * accel[1]),
                        waypoints=_rounded(future * np.array([1.0, sign])),
                        image_index=len(images) - 1,
                    )
                )
    return ImagePool(images, by_command), samples
