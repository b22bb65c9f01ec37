"""Synthetic NAVSIM-style planning samples (speed, acceleration, command → 8 waypoints from a kinematic
model) and the pool of rendered sample-drive images they use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.core.prompts import build_planning_prompt, format_number
from wam_diff2_ros.demo.train.config import (
    COMMAND_PROBABILITIES,
    COMMANDS,
    DRIVE_SECONDS,
    IMAGE_SIZES,
    MAX_SPEED,
    NUM_WAYPOINTS,
    SPEED_CAP,
    WAYPOINT_DT,
)


@dataclass(frozen=True)
class DrivingSample:
    """One planning sample: telemetry, command, the index of its image, and the ground-truth waypoints."""

    command: str
    velocity: tuple[float, float]
    acceleration: tuple[float, float]
    waypoints: tuple[tuple[float, float], ...]  # 8 (x, y), metres, ego frame, rounded like the answer
    image_index: int

    @property
    def prompt(self) -> str:
        """The NAVSIM planning prompt (``navsim`` template, one image)."""
        return build_planning_prompt(self.command, self.velocity, self.acceleration, template="navsim")

    @property
    def answer(self) -> str:
        """The answer text: 16 comma-separated numbers with two decimals."""
        return format_answer(np.asarray(self.waypoints))

    @property
    def speed(self) -> float:
        """Ego speed in m/s."""
        return math.hypot(*self.velocity)


def format_answer(waypoints: np.ndarray) -> str:
    """``x1,y1,...,x8,y8`` with two decimals, ``-0.00`` written ``0.00`` (the training data's format)."""
    return ",".join(format_number(float(v)) for v in np.asarray(waypoints, dtype=float).reshape(-1))


def travelled_distance(v0: float, accel: float, t: np.ndarray, v_cap: float = SPEED_CAP) -> np.ndarray:
    """Distance along the path after `t` seconds at constant acceleration, stopping at 0 and capped at `v_cap`."""
    t = np.asarray(t, dtype=float)
    if accel < 0.0:
        t_stop = v0 / -accel
        moving = np.minimum(t, t_stop)
        return v0 * moving + 0.5 * accel * moving**2
    if accel > 0.0 and v0 < v_cap:
        t_cap = (v_cap - v0) / accel
        ramp = np.minimum(t, t_cap)
        return v0 * ramp + 0.5 * accel * ramp**2 + v_cap * np.maximum(t - t_cap, 0.0)
    return v0 * t


def turn_knots(
    kappa0: float, kappa_turn: float, start: float, ramp: float, yaw_budget: float
) -> tuple[list[float], list[float]]:
    """Piecewise-linear curvature (s, kappa) knots of a turn (kappa_turn > 0): keep kappa0 until `start`,
    ramp to kappa_turn, hold, and ramp out over `ramp` metres once about `yaw_budget` radians are turned."""
    ramp_in = ramp * abs(kappa_turn - kappa0) / kappa_turn
    turned = kappa0 * start + 0.5 * (kappa0 + kappa_turn) * ramp_in + 0.5 * kappa_turn * ramp
    hold = max(0.0, (yaw_budget - turned) / kappa_turn)
    s = [0.0, start, start + ramp_in, start + ramp_in + hold, start + ramp_in + hold + ramp]
    k = [kappa0, kappa0, kappa_turn, kappa_turn, 0.0]
    return s, k


def path_points(knots_s: Sequence[float], knots_k: Sequence[float], distances: np.ndarray) -> np.ndarray:
    """Ego-frame (x, y) at arc lengths `distances` along a path starting at the origin heading +x whose
    curvature is piecewise linear through the knots (constant beyond them)."""
    distances = np.asarray(distances, dtype=float)
    step = 0.05
    s = np.arange(0.0, float(distances.max(initial=0.0)) + 2 * step, step)
    kappa = np.interp(s, knots_s, knots_k)
    yaw = np.concatenate([[0.0], np.cumsum((kappa[1:] + kappa[:-1]) * 0.5 * step)])
    x = np.concatenate([[0.0], np.cumsum((np.cos(yaw[1:]) + np.cos(yaw[:-1])) * 0.5 * step)])
    y = np.concatenate([[0.0], np.cumsum((np.sin(yaw[1:]) + np.sin(yaw[:-1])) * 0.5 * step)])
    return np.stack([np.interp(distances, s, x), np.interp(distances, s, y)], axis=1)


def sample_driving_sample(rng: np.random.Generator, image_choices: dict[str, Sequence[int]]) -> DrivingSample:
    """Draw one synthetic sample; `image_choices` maps each command to the image indices that fit it."""
    command = COMMANDS[int(rng.choice(len(COMMANDS), p=COMMAND_PROBABILITIES))]
    turning = command in ("left", "right")
    if rng.random() < 0.05:  # standing, about to move off (or not)
        v0, accel = 0.0, float(rng.uniform(0.0, 1.5))
    else:
        v0 = float(rng.uniform(0.0, MAX_SPEED))
        if turning and v0 > 10.0:
            accel = float(rng.uniform(-2.5, 0.5))
        elif turning:
            accel = float(rng.uniform(-1.5, 1.5))
        else:
            accel = float(rng.uniform(-2.5, 1.5))
    times = WAYPOINT_DT * np.arange(1, NUM_WAYPOINTS + 1)
    distances = travelled_distance(v0, accel, times)
    if turning:
        v_ref = max(float(distances[-1]) / float(times[-1]), 2.0)
        kappa_turn = min(1.0 / float(rng.uniform(7.0, 14.0)), float(rng.uniform(1.5, 3.0)) / v_ref**2)
        yaw_budget = float(rng.uniform(math.pi / 3, math.pi / 2))
        if rng.random() < 0.5:  # approaching the turn: it starts within the next ~1.5 s, so the command shows
            kappa0, start = float(rng.normal(0.0, 0.001)), float(rng.uniform(0.0, min(12.0, 0.4 * distances[-1])))
        else:  # already in it
            kappa0, start = kappa_turn * float(rng.uniform(0.2, 1.0)), 0.0
            yaw_budget *= float(rng.uniform(0.3, 1.0))
        knots_s, knots_k = turn_knots(kappa0, kappa_turn, start, float(rng.uniform(5.0, 10.0)), yaw_budget)
        if command == "right":
            knots_k, kappa0 = [-k for k in knots_k], -kappa0
    else:
        kappa0 = float(rng.normal(0.0, 0.002))
        knots_s, knots_k = [0.0, float(rng.uniform(10.0, 40.0))], [kappa0, float(rng.normal(0.0, 0.0008))]
    points = path_points(knots_s, knots_k, distances)
    vy = v0 * float(rng.normal(0.0, 0.005))
    vx = math.sqrt(max(v0 * v0 - vy * vy, 0.0))
    ay = v0 * v0 * kappa0 + float(rng.normal(0.0, 0.05))
    choices = image_choices[command]
    rounded = np.array([float(format_number(float(v))) for v in points.reshape(-1)]).reshape(NUM_WAYPOINTS, 2)
    return DrivingSample(
        command=command,
        velocity=(vx, vy),
        acceleration=(accel, ay),
        waypoints=tuple((float(x), float(y)) for x, y in rounded),
        image_index=int(choices[int(rng.integers(len(choices)))]),
    )


def make_samples(count: int, seed: int, image_choices: dict[str, Sequence[int]]) -> list[DrivingSample]:
    """`count` samples drawn from `seed` (the split is the seed)."""
    rng = np.random.default_rng(seed)
    samples = []
    while len(samples) < count:
        sample = sample_driving_sample(rng, image_choices)
        if parse_waypoints(sample.answer).valid:
            samples.append(sample)
    return samples


# --------------------------------------------------------------------------------------------------
# Images: frames of the synthetic sample drive that fit the command


@dataclass
class ImagePool:
    """Front images (uint8 RGB) and which of them fit each command."""

    images: list[np.ndarray]
    by_command: dict[str, list[int]]


def render_image_pool(
    drive_seeds: Sequence[int], frames_per_kind: int, seed: int, sizes: Sequence[tuple[int, int]] = IMAGE_SIZES
) -> ImagePool:
    """Render, per drive, `frames_per_kind` frames in or just before its left turn and as many on straights.

    ``left`` gets the turn frames, ``right`` the same frames mirrored, ``straight`` the straight frames and
    their mirror images, ``unknown`` any of them. Frame ``i`` of drive ``d`` has size ``sizes[(d + i) % n]``.
    """
    from wam_diff2_ros.sim import render_frames, simulate_drive

    rng = np.random.default_rng(seed)
    images: list[np.ndarray] = []
    by_command: dict[str, list[int]] = {name: [] for name in COMMANDS}
    for d, drive_seed in enumerate(drive_seeds):
        track = simulate_drive(DRIVE_SECONDS, drive_seed)
        entry = (track.turn_entry_ns - track.start_ns) / 1e9
        leave = (track.turn_exit_ns - track.start_ns) / 1e9
        turn_times = rng.uniform(entry - 2.5, leave - 1.0, frames_per_kind)
        straight_ranges = [(0.5, entry - 4.0), (leave + 3.0, DRIVE_SECONDS - 1.0)]
        straight_times = [float(rng.uniform(*straight_ranges[i % 2])) for i in range(frames_per_kind)]
        times = [*turn_times, *straight_times]
        frame_sizes = [sizes[(d + i) % len(sizes)] for i in range(len(times))]
        frames: list[np.ndarray] = [np.zeros(0, dtype=np.uint8)] * len(times)
        for size in dict.fromkeys(frame_sizes):
            members = [i for i, s in enumerate(frame_sizes) if s == size]
            for i, frame in zip(
                members, render_frames(DRIVE_SECONDS, drive_seed, *size, [times[i] for i in members]), strict=True
            ):
                frames[i] = frame
        for i, frame in enumerate(frames):
            mirrored = np.ascontiguousarray(frame[:, ::-1])
            kinds = ("left", "right") if i < frames_per_kind else ("straight", "straight")
            for kind, image in zip(kinds, (frame, mirrored), strict=True):
                by_command[kind].append(len(images))
                by_command["unknown"].append(len(images))
                images.append(image)
    return ImagePool(images, by_command)
