"""A deterministic synthetic drive written as a rosbag2 MCAP bag (``wam-diff2-make-sample-bag``).

The ego vehicle drives in the right lane of a two-lane road with lane markings: straight at
cruise speed (~8 m/s), braking to ~4.5 m/s for a 90° left turn (lane radius 18–26 m, from the
seed), re-accelerating onto a straight, then a gentle right curve (radius 90 m) at cruise speed
and a long straight. Curvature changes over 8 m (clothoid-like), speed changes follow raised-
cosine profiles, so velocity, yaw rate and acceleration are continuous. Other vehicles are
cuboids: a lead car in the ego lane (2.2 s time gap), oncoming cars, parked cars on both
shoulders; poles, trees and buildings line the road. Everything follows from ``--seed``.

Topics (:data:`SAMPLE_TOPICS`, types in :data:`SAMPLE_TYPES`), all offered reliable / volatile /
keep-last 10, so both reliable and best-effort subscribers receive them when the bag is played:

- ``/camera/front/image_raw/compressed``: ``sensor_msgs/msg/CompressedImage``, JPEG, 10 Hz
  (with ``--raw`` instead ``/camera/front/image_raw``: ``sensor_msgs/msg/Image``, rgb8)
- ``/camera/front/camera_info``: ``sensor_msgs/msg/CameraInfo`` (pinhole, no distortion), 10 Hz
- ``/odom``: ``nav_msgs/msg/Odometry``, 50 Hz
- ``/imu/acceleration``: ``geometry_msgs/msg/AccelWithCovarianceStamped``, 50 Hz
- ``/navigation/command``: ``std_msgs/msg/String`` (``straight`` / ``left``), 2 Hz

Frames (REP 103/105): odometry ``odom`` -> ``base_link`` (the rear axle; the drive starts at the
``odom`` origin heading along +x), twist and acceleration in ``base_link`` (x forward, y left);
images in ``camera_front_optical`` (z forward, x right, y down), mounted 1.6 m ahead of the rear
axle, 1.45 m up, pitched 2° down, no distortion. The command follows NAVSIM semantics: ``left``
from 3 s before the ego enters the left turn until it leaves it, ``straight`` otherwise (the
gentle right curve is lane following, not a turn). Header stamps are simulated time from
1700000000 s; each message's bag receive time equals its header stamp (the command, a
``std_msgs/String``, has no header: its receive time is its stamp). Ground truth without
decoding anything: :func:`simulate_drive`.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

SAMPLE_TOPICS: dict[str, str] = {
    "image_compressed": "/camera/front/image_raw/compressed",
    "image_raw": "/camera/front/image_raw",
    "camera_info": "/camera/front/camera_info",
    "odometry": "/odom",
    "command": "/navigation/command",
    "acceleration": "/imu/acceleration",
}
SAMPLE_TYPES: dict[str, str] = {
    "image_compressed": "sensor_msgs/msg/CompressedImage",
    "image_raw": "sensor_msgs/msg/Image",
    "camera_info": "sensor_msgs/msg/CameraInfo",
    "odometry": "nav_msgs/msg/Odometry",
    "command": "std_msgs/msg/String",
    "acceleration": "geometry_msgs/msg/AccelWithCovarianceStamped",
}
ODOM_FRAME = "odom"
BASE_FRAME = "base_link"
CAMERA_FRAME = "camera_front_optical"
DEFAULT_START_NS = 1_700_000_000 * 1_000_000_000

ODOM_RATE_HZ = 50.0
COMMAND_RATE_HZ = 2.0
CAMERA_RATE_HZ = 10.0
CAMERA_PHASE_S = 0.005  # camera exposures are not aligned with the odometry ticks
COMMAND_LEAD_S = 3.0  # "left" this long before the ego enters the turn

# Camera mount in base_link and optics.
CAMERA_X_M, CAMERA_Z_M, CAMERA_PITCH_RAD = 1.6, 1.45, math.radians(2.0)
HORIZONTAL_FOV_RAD = math.radians(70.0)

# Road cross-section, as lateral offsets d (m, left positive) from the ego lane centre.
LANE_WIDTH = 3.5
RIGHT_EDGE_D, CENTRE_D, LEFT_EDGE_D = -LANE_WIDTH / 2, LANE_WIDTH / 2, 1.5 * LANE_WIDTH
ASPHALT_D = (-2.6, 6.1)
SHOULDER_D = (-3.6, 7.1)
LINE_WIDTH = 0.15
DASH_LENGTH, DASH_PERIOD = 3.0, 9.0
TRANSITION_M = 8.0  # the ego's curvature ramps over this distance (box filter of the road's)

_MAX_SECONDS = 120.0
_TIME_DS = 0.01
_PATH_DS = 0.05
_LOOKAHEAD_S = 12.0  # ground truth (and the lead car) extend this far beyond the bag


# --------------------------------------------------------------------------------------------
# Road geometry


@dataclass(frozen=True)
class _Segment:
    """A straight (curvature 0) or circular arc of the ego lane centre line."""

    s0: float
    length: float
    curvature: float
    x0: float
    y0: float
    yaw0: float
    first: bool = False
    last: bool = False

    @property
    def centre(self) -> tuple[float, float]:
        r = 1.0 / self.curvature
        return self.x0 - r * math.sin(self.yaw0), self.y0 + r * math.cos(self.yaw0)

    def pose(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        u = s - self.s0
        if self.curvature == 0.0:
            return self.x0 + u * math.cos(self.yaw0), self.y0 + u * math.sin(self.yaw0), self.yaw0 + 0 * u
        cx, cy = self.centre
        yaw = self.yaw0 + self.curvature * u
        r = 1.0 / self.curvature
        return cx + r * np.sin(yaw), cy - r * np.cos(yaw), yaw

    def project(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Arc length ``s``, lateral offset ``d`` (left +) and whether the point is beside us."""
        if self.curvature == 0.0:
            c, s_ = math.cos(self.yaw0), math.sin(self.yaw0)
            dx, dy = x - self.x0, y - self.y0
            along = dx * c + dy * s_
            lat = -dx * s_ + dy * c
            valid = np.ones(along.shape, bool)
            if not self.first:
                valid &= along >= 0
            if not self.last:
                valid &= along <= self.length
            return self.s0 + along, lat, valid
        cx, cy = self.centre
        sign = 1.0 if self.curvature > 0 else -1.0
        radius = 1.0 / abs(self.curvature)
        phi0 = math.atan2(self.y0 - cy, self.x0 - cx)
        psi = sign * (np.arctan2(y - cy, x - cx) - phi0)
        psi = (psi + math.pi) % (2 * math.pi) - math.pi
        rho = np.hypot(x - cx, y - cy)
        valid = (psi >= 0) & (psi <= self.length / radius)
        return self.s0 + psi * radius, sign * (radius - rho), valid


@dataclass(frozen=True)
class _Road:
    segments: tuple[_Segment, ...]
    left_arc: tuple[float, float]  # s range of the left turn
    right_arc: tuple[float, float]

    @staticmethod
    def build(pieces: Sequence[tuple[float, float]]) -> _Road:
        """Chain (length, curvature) pieces starting at the origin heading +x."""
        segs: list[_Segment] = []
        x = y = yaw = s = 0.0
        for i, (length, kappa) in enumerate(pieces):
            seg = _Segment(s, length, kappa, x, y, yaw, first=i == 0, last=i == len(pieces) - 1)
            segs.append(seg)
            xe, ye, yawe = seg.pose(np.array([s + length]))
            x, y, yaw, s = float(xe[0]), float(ye[0]), float(yawe[0]), s + length
        arcs = [(g.s0, g.s0 + g.length, g.curvature) for g in segs if g.curvature != 0.0]
        left = next((a, b) for a, b, k in arcs if k > 0)
        right = next(((a, b) for a, b, k in arcs if k < 0), (math.inf, math.inf))
        return _Road(tuple(segs), left, right)

    @property
    def length(self) -> float:
        return self.segments[-1].s0 + self.segments[-1].length

    def curvature_integral(self, s: np.ndarray) -> np.ndarray:
        """∫₀ˢ κ(u) du of the lane centre line (piecewise linear, extended flat at both ends)."""
        knots = np.array([0.0] + [g.s0 + g.length for g in self.segments])
        values = np.concatenate([[0.0], np.cumsum([g.length * g.curvature for g in self.segments])])
        return np.interp(s, knots, values)

    def curvature(self, s: np.ndarray) -> np.ndarray:
        out = np.zeros_like(s, dtype=float)
        for g in self.segments:
            out = np.where((s >= g.s0) & (s < g.s0 + g.length), g.curvature, out)
        return out

    def pose(self, s: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """World pose of the lane centre line at arc length ``s`` (extrapolated at both ends)."""
        s = np.atleast_1d(np.asarray(s, float))
        x, y, yaw = np.zeros_like(s), np.zeros_like(s), np.zeros_like(s)
        for g in self.segments:
            mask = np.ones(s.shape, bool)
            if not g.first:
                mask &= s >= g.s0
            if not g.last:
                mask &= s < g.s0 + g.length
            if mask.any():
                xs, ys, yaws = g.pose(s[mask])
                x[mask], y[mask], yaw[mask] = xs, ys, yaws
        return x, y, yaw

    def frenet_to_world(self, s: np.ndarray | float, d: np.ndarray | float) -> tuple[np.ndarray, ...]:
        x, y, yaw = self.pose(s)
        return x - np.sin(yaw) * d, y + np.cos(yaw) * d, yaw

    def project(self, x: np.ndarray, y: np.ndarray, near_s: float, reach: float) -> tuple[np.ndarray, np.ndarray]:
        """``(s, d)`` of world points w.r.t. the segment they are beside with the smallest |d|."""
        best_d = np.full(x.shape, np.inf, x.dtype)
        best_s = np.zeros(x.shape, x.dtype)
        for g in self.segments:
            if g.s0 > near_s + reach or g.s0 + g.length < near_s - 40.0:
                continue
            s, d, valid = g.project(x, y)
            better = valid & (np.abs(d) < np.abs(best_d))
            best_d = np.where(better, d, best_d)
            best_s = np.where(better, s, best_s)
        return best_s, best_d


# --------------------------------------------------------------------------------------------
# Scenario: road, speeds, ego path, other actors


def _raised_cosine(s: np.ndarray, s_a: float, s_b: float, v_a: float, v_b: float) -> tuple[np.ndarray, ...]:
    """Speed and dv/ds of a raised-cosine change from v_a at s_a to v_b at s_b."""
    u = np.clip((s - s_a) / (s_b - s_a), 0.0, 1.0)
    v = v_a + (v_b - v_a) * (1 - np.cos(np.pi * u)) / 2
    dv = np.where((s > s_a) & (s < s_b), (v_b - v_a) * np.pi * np.sin(np.pi * u) / (2 * (s_b - s_a)), 0.0)
    return v, dv


@dataclass(frozen=True)
class _Actor:
    """A rigid object: cuboid parts (centre, size, rgb) in its own frame, and where it is when."""

    parts: tuple[tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]], ...]
    pose: Callable[[float], tuple[float, float, float]]  # t_s -> world x, y, yaw
    decals: tuple[tuple[int, int, tuple[float, float, float, float], tuple[float, float, float]], ...] = ()
    static_xy: tuple[float, float] | None = None  # for culling static objects cheaply


class _Scenario:
    """Everything :func:`simulate_drive` and the renderer need, derived from the seed."""

    def __init__(self, seconds: float, seed: int) -> None:
        if not (0.0 < seconds <= _MAX_SECONDS):
            raise ValueError(f"seconds must be in (0, {_MAX_SECONDS:g}], not {seconds}")
        rng = np.random.default_rng(seed)
        self.seed = seed
        self.seconds = float(seconds)
        self.cruise = float(rng.uniform(7.6, 8.4))
        self.turn_speed = float(rng.uniform(4.2, 4.8))
        self.turn_radius = float(rng.uniform(18.0, 26.0))
        right_radius, right_angle = 90.0, math.radians(25.0)
        self.road = _Road.build(
            [
                (58.0, 0.0),
                (self.turn_radius * math.pi / 2, 1.0 / self.turn_radius),
                (45.0, 0.0),
                (right_radius * right_angle, -1.0 / right_radius),
                (1200.0, 0.0),
            ]
        )
        self.brake_m, self.accel_m = 25.0, 35.0
        self._build_path()
        self._build_timing()
        self.actors = self._build_actors(rng)
        self.ground_texture = _value_noise(rng, 256, 8)
        self.cloud_texture = _value_noise(rng, 256, 32)

    # speed along the path ------------------------------------------------------------------
    def speed(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Speed (m/s) and dv/ds at ego arc length ``s``."""
        s = np.asarray(s, float)
        a0, a1 = self.road.left_arc
        half = TRANSITION_M / 2
        v1, dv1 = _raised_cosine(s, a0 - half - self.brake_m, a0 - half, self.cruise, self.turn_speed)
        v2, dv2 = _raised_cosine(s, a1 + half, a1 + half + self.accel_m, 0.0, self.cruise - self.turn_speed)
        return v1 + v2, dv1 + dv2

    # ego path: the lane centre line with curvature box-filtered over TRANSITION_M ------------
    def _build_path(self) -> None:
        half = TRANSITION_M / 2
        s = np.arange(0.0, self.road.length, _PATH_DS)
        kappa = (self.road.curvature_integral(s + half) - self.road.curvature_integral(s - half)) / TRANSITION_M
        yaw = np.concatenate([[0.0], np.cumsum((kappa[1:] + kappa[:-1]) / 2 * _PATH_DS)])
        c, sn = np.cos(yaw), np.sin(yaw)
        x = np.concatenate([[0.0], np.cumsum((c[1:] + c[:-1]) / 2 * _PATH_DS)])
        y = np.concatenate([[0.0], np.cumsum((sn[1:] + sn[:-1]) / 2 * _PATH_DS)])
        self.path_s, self.path_x, self.path_y, self.path_yaw = s, x, y, yaw

    def curvature(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ego path curvature and its derivative d kappa / ds at ``s``."""
        half = TRANSITION_M / 2
        kappa = (self.road.curvature_integral(s + half) - self.road.curvature_integral(s - half)) / TRANSITION_M
        dkappa = (self.road.curvature(s + half) - self.road.curvature(s - half)) / TRANSITION_M
        return kappa, dkappa

    def ego_pose_at_s(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.interp(s, self.path_s, self.path_x),
            np.interp(s, self.path_s, self.path_y),
            np.interp(s, self.path_s, self.path_yaw),
        )

    # time along the path: t(s) = integral of ds / v(s) -------------------------------------
    def _build_timing(self) -> None:
        s = np.arange(0.0, self.road.length, _TIME_DS)
        inv_v = 1.0 / self.speed(s)[0]
        self.time_s = s
        self.time_t = np.concatenate([[0.0], np.cumsum((inv_v[1:] + inv_v[:-1]) / 2 * _TIME_DS)])
        if self.time_t[-1] < self.seconds + _LOOKAHEAD_S:
            raise ValueError(f"the road is too short for {self.seconds} s")

    def s_at(self, t: np.ndarray | float) -> np.ndarray:
        return np.interp(t, self.time_t, self.time_s)

    def t_at_s(self, s: float) -> float:
        return float(np.interp(s, self.time_s, self.time_t))

    # other actors ---------------------------------------------------------------------------
    def _build_actors(self, rng: np.random.Generator) -> list[_Actor]:
        road = self.road
        actors: list[_Actor] = []
        end_s = float(self.s_at(self.seconds)) + 160.0
        a0, a1 = road.left_arc

        def car_at(s: float, d: float, flip: bool, colour: tuple[float, float, float]) -> _Actor:
            x, y, yaw = (float(v[0]) for v in road.frenet_to_world(s, d))
            return _car(colour, rng, lambda _t: (x, y, yaw + (math.pi if flip else 0.0)), (x, y))

        # A lead car in the ego lane, 2.2 s ahead on the same speed profile.
        lead_gap_s, lead_gap_m = 2.6, 5.0

        def lead_pose(t: float) -> tuple[float, float, float]:
            x, y, yaw = road.pose(self.s_at(t + lead_gap_s) + lead_gap_m)
            return float(x[0]), float(y[0]), float(yaw[0])

        actors.append(_car((0.62, 0.08, 0.07), rng, lead_pose, None))
        # Oncoming cars passing the ego at spread-out times.
        n_oncoming = max(1, int(self.seconds / 5))
        for k in range(n_oncoming):
            t_meet = self.seconds * (k + 0.5 + rng.uniform(-0.2, 0.2)) / n_oncoming + 1.5
            s_meet = float(self.s_at(t_meet))
            v_k = float(rng.uniform(6.0, 9.5))

            def oncoming_pose(t: float, s_m: float = s_meet, t_m: float = t_meet, v: float = v_k) -> tuple:
                x, y, yaw = road.frenet_to_world(s_m + v * (t_m - t), LANE_WIDTH)
                return float(x[0]), float(y[0]), float(yaw[0]) + math.pi

            actors.append(_car(_random_car_colour(rng), rng, oncoming_pose, None))
        # Parked cars: right shoulder (same direction), a few on the left shoulder.
        s = 15.0
        while s < end_s:
            s += float(rng.uniform(9.0, 40.0))
            if a0 - 15.0 < s < a1 + 8.0:
                continue
            actors.append(car_at(s, -3.1, False, _random_car_colour(rng)))
            if rng.random() < 0.4:
                s += 6.0
                actors.append(car_at(s, -3.1, False, _random_car_colour(rng)))
        s = 30.0
        while s < end_s:
            s += float(rng.uniform(35.0, 90.0))
            if not (a0 - 15.0 < s < a1 + 8.0):
                actors.append(car_at(s, LEFT_EDGE_D + 1.6, True, _random_car_colour(rng)))
        # Street-light poles on the right, trees and buildings further out.
        centre_x, centre_y, _ = road.frenet_to_world(np.arange(-50.0, end_s + 60.0, 1.0), CENTRE_D)
        road_pts = np.stack([centre_x, centre_y], axis=1)

        def clear(x: float, y: float, radius: float) -> bool:
            half_road = max(-SHOULDER_D[0] + CENTRE_D, SHOULDER_D[1] - CENTRE_D)
            return bool(np.min(np.hypot(road_pts[:, 0] - x, road_pts[:, 1] - y)) > half_road + 0.5 + radius)

        for s in np.arange(10.0, end_s, 28.0):
            x, y, yaw = (float(v[0]) for v in road.frenet_to_world(float(s), -4.3))
            if clear(x, y, 0.1):
                actors.append(_pole(x, y, yaw))
        for _ in range(int(end_s / 6)):
            s = float(rng.uniform(-20.0, end_s))
            d = float(rng.choice([-1, 1]) * rng.uniform(9.0, 16.0) + CENTRE_D)
            x, y, _yaw = (float(v[0]) for v in road.frenet_to_world(s, d))
            if clear(x, y, 2.0):
                actors.append(_tree(x, y, rng))
        for _ in range(int(end_s / 12)):
            s = float(rng.uniform(-20.0, end_s))
            side = rng.choice([-1, 1])
            d = float(side * rng.uniform(24.0, 40.0) + CENTRE_D)
            x, y, yaw = (float(v[0]) for v in road.frenet_to_world(s, d))
            size = (float(rng.uniform(8, 18)), float(rng.uniform(8, 16)), float(rng.uniform(5, 14)))
            if clear(x, y, math.hypot(size[0], size[1]) / 2):
                actors.append(_building(x, y, yaw, size, rng))
        return actors


def _random_car_colour(rng: np.random.Generator) -> tuple[float, float, float]:
    palette = [
        (0.85, 0.85, 0.86),
        (0.12, 0.12, 0.14),
        (0.55, 0.56, 0.58),
        (0.16, 0.25, 0.55),
        (0.62, 0.08, 0.07),
        (0.88, 0.88, 0.80),
        (0.20, 0.38, 0.25),
        (0.75, 0.55, 0.20),
    ]
    return palette[int(rng.integers(len(palette)))]


def _car(colour, rng, pose, static_xy) -> _Actor:
    length = float(rng.uniform(4.1, 4.9))
    width = float(rng.uniform(1.75, 1.9))
    body_h = 0.85
    cabin_l, cabin_h = length * 0.52, float(rng.uniform(0.55, 0.65))
    glass = (0.18, 0.22, 0.27)
    tyre = (0.05, 0.05, 0.05)
    wheel_y = width / 2 - 0.12
    # Drawn in this order: wheels (only their part below the body stays visible), body, cabin.
    parts = (
        ((0.32 * length, wheel_y, 0.33), (0.64, 0.22, 0.64), tyre),
        ((0.32 * length, -wheel_y, 0.33), (0.64, 0.22, 0.64), tyre),
        ((-0.32 * length, wheel_y, 0.33), (0.64, 0.22, 0.64), tyre),
        ((-0.32 * length, -wheel_y, 0.33), (0.64, 0.22, 0.64), tyre),
        ((0.0, 0.0, 0.25 + body_h / 2), (length, width, body_h), colour),
        ((-0.08 * length, 0.0, 0.25 + body_h + cabin_h / 2), (cabin_l, width * 0.9, cabin_h), colour),
    )
    red, white = (0.85, 0.05, 0.04), (0.95, 0.93, 0.80)
    decals = (
        (4, 1, (-0.95, -0.62, 0.2, 0.7), red),  # tail lights (body rear face), u across, v up
        (4, 1, (0.62, 0.95, 0.2, 0.7), red),
        (4, 0, (-0.95, -0.6, 0.1, 0.6), white),  # head lights
        (4, 0, (0.6, 0.95, 0.1, 0.6), white),
        (5, 0, (-0.92, 0.92, -0.85, 0.85), glass),  # windscreen, rear window, side windows
        (5, 1, (-0.9, 0.9, -0.8, 0.85), glass),
        (5, 2, (-0.85, 0.85, -0.75, 0.8), glass),
        (5, 3, (-0.85, 0.85, -0.75, 0.8), glass),
    )
    return _Actor(parts, pose, decals, static_xy)


def _pole(x: float, y: float, yaw: float) -> _Actor:
    grey = (0.45, 0.46, 0.48)
    parts = (((0.0, 0.0, 3.5), (0.16, 0.16, 7.0), grey), ((0.0, 1.0, 6.95), (0.3, 2.0, 0.12), grey))
    return _Actor(parts, lambda _t: (x, y, yaw), (), (x, y))


def _tree(x: float, y: float, rng: np.random.Generator) -> _Actor:
    canopy = float(rng.uniform(2.5, 4.5))
    trunk_h = float(rng.uniform(1.8, 2.6))
    green = (float(rng.uniform(0.12, 0.22)), float(rng.uniform(0.30, 0.42)), float(rng.uniform(0.10, 0.16)))
    yaw = float(rng.uniform(0, math.pi / 2))
    parts = (
        ((0.0, 0.0, trunk_h + canopy * 0.45), (canopy, canopy, canopy * 0.9), green),
        ((0.0, 0.0, trunk_h / 2), (0.35, 0.35, trunk_h), (0.33, 0.23, 0.14)),
    )
    return _Actor(parts, lambda _t: (x, y, yaw), (), (x, y))


def _building(x: float, y: float, yaw: float, size, rng: np.random.Generator) -> _Actor:
    base = [(0.72, 0.66, 0.58), (0.62, 0.60, 0.58), (0.70, 0.52, 0.42), (0.80, 0.78, 0.72)]
    colour = base[int(rng.integers(len(base)))]
    parts = (((0.0, 0.0, size[2] / 2), size, colour),)
    window = (0.25, 0.30, 0.36)
    rows = max(1, int(size[2] / 3.2))
    decals = []
    for face in (0, 1, 2, 3):
        for r in range(rows):
            v0 = -1 + (2 * r + 0.8) / rows
            decals.append((0, face, (-0.85, 0.85, v0, v0 + 0.9 / rows), window))
    return _Actor(parts, lambda _t: (x, y, yaw), tuple(decals), (x, y))


def _value_noise(rng: np.random.Generator, size: int, cell: int) -> np.ndarray:
    """Smooth, tileable noise in [0, 1] (size+1 square, see :func:`_sample`): a random lattice
    upsampled with a cosine blend."""
    n = size // cell
    lattice = rng.random((n, n))
    u = (np.arange(size) % cell) / cell
    w = (1 - np.cos(np.pi * u)) / 2
    i0 = (np.arange(size) // cell) % n
    i1 = (i0 + 1) % n
    rows = lattice[i0] * (1 - w)[:, None] + lattice[i1] * w[:, None]
    noise = (rows[:, i0] * (1 - w)[None, :] + rows[:, i1] * w[None, :]).astype(np.float32)
    return np.pad(noise, ((0, 1), (0, 1)), mode="wrap")  # +1 row/column: lookups never wrap


def _sample(texture: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Bilinear, wrapping lookup at texel coords (u columns, v rows) of a padded power-of-two
    texture from :func:`_value_noise`."""
    size = texture.shape[0] - 1
    u0f, v0f = np.floor(u), np.floor(v)
    fu, fv = (u - u0f).astype(np.float32), (v - v0f).astype(np.float32)
    mask = size - 1
    idx = (v0f.astype(np.int64) & mask) * (size + 1) + (u0f.astype(np.int64) & mask)
    flat = texture.ravel()
    top = flat[idx]
    top += (flat[idx + 1] - top) * fu
    bottom = flat[idx + size + 1]
    bottom += (flat[idx + size + 2] - bottom) * fu
    top += (bottom - top) * fv
    return top


# --------------------------------------------------------------------------------------------
# Ground truth


@dataclass(frozen=True)
class DriveTrack:
    """The ego's motion as sampled for the bag (odometry rate) plus the navigation commands.

    Arrays share ``stamps_ns`` (int64, absolute). Pose of the rear axle in ``odom`` (x, y, yaw);
    ``speed`` forward, ``yaw_rate``, ``accel_x``/``accel_y`` (longitudinal / lateral, base_link),
    ``yaw_accel``; ``arc_length`` along the ego path and its ``curvature``.
    """

    seed: int
    start_ns: int
    stamps_ns: np.ndarray
    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    speed: np.ndarray
    yaw_rate: np.ndarray
    accel_x: np.ndarray
    accel_y: np.ndarray
    yaw_accel: np.ndarray
    arc_length: np.ndarray
    curvature: np.ndarray
    command_stamps_ns: np.ndarray
    commands: tuple[str, ...]
    turn_entry_ns: int  # the ego reaches the left turn's arc
    turn_exit_ns: int  # ... and leaves it
    turn_radius_m: float  # lane-centre radius of the left turn
    _scenario: _Scenario | None = field(default=None, repr=False, compare=False)

    @property
    def duration_s(self) -> float:
        return (int(self.stamps_ns[-1]) - self.start_ns) / 1e9

    def command_at(self, stamp_ns: int) -> str:
        """The navigation command in force at ``stamp_ns`` (NAVSIM text: left/straight/...)."""
        return _command_for(stamp_ns, self.turn_entry_ns, self.turn_exit_ns)

    def pose_at(self, stamp_ns: int) -> tuple[float, float, float]:
        """Pose (x, y, yaw) at any stamp up to 12 s beyond the sampled range."""
        assert self._scenario is not None
        s = self._scenario.s_at((stamp_ns - self.start_ns) / 1e9)
        x, y, yaw = self._scenario.ego_pose_at_s(np.atleast_1d(s))
        return float(x[0]), float(y[0]), float(yaw[0])


def _kinematics(sc: _Scenario, t: np.ndarray) -> dict[str, np.ndarray]:
    s = sc.s_at(t)
    v, dv_ds = sc.speed(s)
    kappa, dkappa = sc.curvature(s)
    x, y, yaw = sc.ego_pose_at_s(s)
    a_long = v * dv_ds
    return {
        "x": x,
        "y": y,
        "yaw": yaw,
        "speed": v,
        "yaw_rate": v * kappa,
        "accel_x": a_long,
        "accel_y": v * v * kappa,
        "yaw_accel": a_long * kappa + v * v * dkappa,
        "arc_length": s,
        "curvature": kappa,
    }


def simulate_drive(
    seconds: float = 25.0,
    seed: int = 0,
    *,
    rate_hz: float = ODOM_RATE_HZ,
    command_rate_hz: float = COMMAND_RATE_HZ,
    start_ns: int = DEFAULT_START_NS,
) -> DriveTrack:
    """The ground-truth ego motion and commands of the sample drive, as the bag carries them."""
    return _track(_Scenario(seconds, seed), rate_hz, command_rate_hz, start_ns)


def _track(sc: _Scenario, rate_hz: float, command_rate_hz: float, start_ns: int) -> DriveTrack:
    offsets = _tick_offsets_ns(sc.seconds, rate_hz, 0.0)
    kin = _kinematics(sc, offsets / 1e9)
    a0, a1 = sc.road.left_arc
    entry_ns = start_ns + round(sc.t_at_s(a0) * 1e9)
    exit_ns = start_ns + round(sc.t_at_s(a1) * 1e9)
    command_stamps = start_ns + _tick_offsets_ns(sc.seconds, command_rate_hz, 0.0)
    return DriveTrack(
        seed=sc.seed,
        start_ns=start_ns,
        stamps_ns=start_ns + offsets,
        command_stamps_ns=command_stamps,
        commands=tuple(_command_for(int(t), entry_ns, exit_ns) for t in command_stamps),
        turn_entry_ns=entry_ns,
        turn_exit_ns=exit_ns,
        turn_radius_m=sc.turn_radius,
        _scenario=sc,
        **kin,
    )


def _command_for(stamp_ns: int, entry_ns: int, exit_ns: int) -> str:
    lead_ns = round(COMMAND_LEAD_S * 1e9)
    return "left" if entry_ns - lead_ns <= stamp_ns < exit_ns else "straight"


def _tick_offsets_ns(seconds: float, rate_hz: float, phase_s: float) -> np.ndarray:
    if rate_hz <= 0:
        raise ValueError(f"rates must be positive, not {rate_hz}")
    period_ns = round(1e9 / rate_hz)
    phase_ns = round(phase_s * 1e9)
    count = math.floor((seconds * 1e9 - phase_ns - 1) / period_ns) + 1
    return phase_ns + period_ns * np.arange(max(count, 0), dtype=np.int64)


# --------------------------------------------------------------------------------------------
# Rendering


@dataclass(frozen=True)
class CameraModel:
    """Pinhole intrinsics (no distortion) of the front camera for an image size."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float

    @staticmethod
    def for_size(width: int, height: int) -> CameraModel:
        f = (width / 2) / math.tan(HORIZONTAL_FOV_RAD / 2)
        return CameraModel(width, height, f, f, (width - 1) / 2, (height - 1) / 2)

    @property
    def k(self) -> list[float]:
        return [self.fx, 0.0, self.cx, 0.0, self.fy, self.cy, 0.0, 0.0, 1.0]

    @property
    def p(self) -> list[float]:
        return [self.fx, 0.0, self.cx, 0.0, 0.0, self.fy, self.cy, 0.0, 0.0, 0.0, 1.0, 0.0]


_SKY_HORIZON = np.array([0.80, 0.86, 0.93], np.float32)
_SKY_ZENITH = np.array([0.33, 0.53, 0.84], np.float32)
_HAZE = np.array([0.78, 0.83, 0.88], np.float32)
_GRASS = np.array([0.30, 0.43, 0.19], np.float32)
_GRAVEL = np.array([0.50, 0.47, 0.42], np.float32)
_ASPHALT = np.array([0.30, 0.30, 0.32], np.float32)
_PAINT = np.array([0.90, 0.90, 0.88], np.float32)
_GROUND_PALETTE = np.stack(
    [_GRASS, _GRAVEL, _ASPHALT, 0.9 * _GRASS, 0.3 * _GRAVEL, 0.18 * _ASPHALT, _PAINT, _HAZE]
).astype(np.float32)
_SUN = np.array([0.45, 0.35, 0.82]) / np.linalg.norm([0.45, 0.35, 0.82])
_HAZE_M = 420.0
_NEAR_M = 0.25
_FAR_M = 170.0
_SUPERSAMPLE = 2

# Unit cube faces: (axis, sign, tangent u axis, tangent v axis).
_FACES = ((0, 1, 1, 2), (0, -1, 1, 2), (1, 1, 0, 2), (1, -1, 0, 2), (2, 1, 0, 1), (2, -1, 0, 1))


def _box_overlap(lo: float, hi: float, centre: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Fraction of the pixel footprint [centre ± width/2] inside [lo, hi] (box-filtered edge)."""
    half = width * np.float32(0.5)
    a = np.maximum(np.float32(lo), centre - half)
    b = np.minimum(np.float32(hi), centre + half)
    out = (b - a) / width
    np.clip(out, 0.0, 1.0, out=out)
    return out


class _Renderer:
    """Renders the front camera: per-pixel sky and ground, then shaded cuboids as polygons."""

    def __init__(self, sc: _Scenario, width: int, height: int) -> None:
        self.sc = sc
        self.cam = CameraModel.for_size(width, height)
        u, v = np.meshgrid(np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64))
        # Optical ray -> camera body (x fwd, y left, z up) -> base_link (pitched down).
        xo, yo = (u - self.cam.cx) / self.cam.fx, (v - self.cam.cy) / self.cam.fy
        bx, by, bz = np.ones_like(xo), -xo, -yo
        cp, sp = math.cos(CAMERA_PITCH_RAD), math.sin(CAMERA_PITCH_RAD)
        dx, dz = cp * bx + sp * bz, -sp * bx + cp * bz
        norm = np.sqrt(dx * dx + by * by + dz * dz)
        dx, dy, dz = dx / norm, by / norm, dz / norm
        ground = dz < -1e-3
        t = np.where(ground, CAMERA_Z_M / np.maximum(-dz, 1e-3), np.inf)
        ground &= t < 3000.0
        self.ground_idx = np.flatnonzero(ground)
        g = self.ground_idx
        tg = t.ravel()[g]
        f32 = np.float32
        self.gx = (CAMERA_X_M + tg * dx.ravel()[g]).astype(f32)
        self.gy = (tg * dy.ravel()[g]).astype(f32)
        self.fp_lat = np.maximum(tg / self.cam.fx, 1e-3).astype(f32)
        self.fp_long = np.maximum(tg / (self.cam.fx * np.maximum(-dz.ravel()[g], 1e-3)), 1e-3).astype(f32)
        self.haze_ground = (1 - np.exp(-tg / _HAZE_M)).astype(f32)[:, None]
        self.near_idx = np.flatnonzero(tg < _FAR_M * 1.6)
        self.close_idx = np.flatnonzero(self.fp_long < 0.25)
        self.fine_amp = (1.0 - self.fp_long[self.close_idx] / 0.25).astype(f32)
        self.sky_idx = np.flatnonzero(~ground)
        k = self.sky_idx
        # The sky depends on the heading only: precompute a panorama (azimuth x elevation) at
        # about one camera pixel per sample and look it up per frame.
        elevation = np.arcsin(np.clip(dz.ravel()[k], -1.0, 1.0))
        azimuth = np.arctan2(dy.ravel()[k], dx.ravel()[k])
        self.pano_cols = round(2 * math.pi * self.cam.fx)
        rows = math.ceil(max(float(elevation.max()), 0.0) * self.cam.fx) + 2
        self.sky_row = np.clip(np.round(elevation * self.cam.fx), 0, rows - 1).astype(np.int64)
        self.sky_col = np.round(azimuth / (2 * math.pi) * self.pano_cols).astype(np.int64)
        self.panorama = _sky_panorama(sc.cloud_texture, rows, self.pano_cols, self.cam.fx)

    def camera_pose(self, t: float) -> tuple[np.ndarray, np.ndarray, float, float, float]:
        """World camera position, world->optical rotation, ego x, y, yaw at time ``t``."""
        s = self.sc.s_at(t)
        x, y, yaw = (float(a[0]) for a in self.sc.ego_pose_at_s(np.atleast_1d(s)))
        cy_, sy_ = math.cos(yaw), math.sin(yaw)
        position = np.array([x + CAMERA_X_M * cy_, y + CAMERA_X_M * sy_, CAMERA_Z_M])
        # body->world: yaw then pitch (down); optical axes in body: z fwd, x right(-y), y down(-z).
        cp, sp = math.cos(CAMERA_PITCH_RAD), math.sin(CAMERA_PITCH_RAD)
        r_yaw = np.array([[cy_, -sy_, 0], [sy_, cy_, 0], [0, 0, 1]])
        r_pitch = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
        body_to_world = r_yaw @ r_pitch
        optical_in_body = np.array([[0, -1, 0], [0, 0, -1], [1, 0, 0]], float)  # rows: x, y, z optical
        world_to_optical = optical_in_body @ body_to_world.T
        return position, world_to_optical, x, y, yaw

    def render(self, t: float) -> np.ndarray:
        """The camera image (H, W, 3) uint8 at simulated time ``t`` seconds."""
        cam = self.cam
        position, w2o, ex, ey, eyaw = self.camera_pose(t)
        img = np.empty((cam.height * cam.width, 3), np.float32)
        self._sky(img, eyaw)
        self._ground(img, ex, ey, eyaw, float(self.sc.s_at(t)))
        frame = img.reshape(cam.height, cam.width, 3)
        shadow, overlay = self._objects(t, position, w2o)
        box = shadow.getbbox()
        if box is not None:
            x0, y0, x1, y1 = box
            mask = np.asarray(shadow.crop(box), np.float32) * (0.42 / 255.0)
            frame[y0:y1, x0:x1] *= 1.0 - mask[:, :, None]
        box = overlay.getbbox()
        if box is not None:
            ss = _SUPERSAMPLE
            x0, y0 = box[0] // ss, box[1] // ss
            x1, y1 = -(-box[2] // ss), -(-box[3] // ss)
            crop = overlay.crop((x0 * ss, y0 * ss, x1 * ss, y1 * ss)).reduce(ss)
            # Transparent overlay pixels are black, so the box-filtered overlay is premultiplied.
            small = np.asarray(crop, np.float32) / 255.0
            region = frame[y0:y1, x0:x1]
            frame[y0:y1, x0:x1] = region * (1.0 - small[:, :, 3:]) + small[:, :, :3]
        return (np.clip(frame, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)

    def _sky(self, img: np.ndarray, yaw: float) -> None:
        shift = round(yaw / (2 * math.pi) * self.pano_cols)
        cols = (self.sky_col + shift) % self.pano_cols
        img[self.sky_idx] = self.panorama[self.sky_row, cols]

    def _ground(self, img: np.ndarray, ex: float, ey: float, eyaw: float, ego_s: float) -> None:
        c, s = np.float32(math.cos(eyaw)), np.float32(math.sin(eyaw))
        wx = np.float32(ex) + c * self.gx - s * self.gy
        wy = np.float32(ey) + s * self.gx + c * self.gy
        near = self.near_idx
        sx = np.zeros_like(wx)
        dd = np.full(wx.shape, 1e6, np.float32)
        s_near, d_near = self.sc.road.project(wx[near], wy[near], ego_s, _FAR_M * 1.6)
        sx[near], dd[near] = s_near, np.where(np.isfinite(d_near), d_near, 1e6)
        fp_lat, fp_long = self.fp_lat, self.fp_long
        tex = self.sc.ground_texture
        grain = (_sample(tex, wx * (1 / 1.6), wy * (1 / 1.6)) - 0.5) * 0.5
        close = self.close_idx  # fine grain only where a pixel covers less than its texel
        fine = _sample(tex, wx[close] * (1 / 0.22) + 97.0, wy[close] * (1 / 0.22) + 31.0)
        grain[close] += (fine - 0.5) * 0.35 * self.fine_amp
        cov_shoulder = _box_overlap(SHOULDER_D[0], SHOULDER_D[1], dd, fp_lat)
        cov_road = _box_overlap(ASPHALT_D[0], ASPHALT_D[1], dd, fp_lat)
        half = LINE_WIDTH / 2
        on_road = np.flatnonzero((dd > RIGHT_EDGE_D - 1.0) & (dd < LEFT_EDGE_D + 1.0))
        d_r, fl_r, fg_r = dd[on_road], fp_lat[on_road], fp_long[on_road]
        paint_r = _box_overlap(RIGHT_EDGE_D - half, RIGHT_EDGE_D + half, d_r, fl_r)
        paint_r += _box_overlap(LEFT_EDGE_D - half, LEFT_EDGE_D + half, d_r, fl_r)
        phase = np.mod(sx[on_road], DASH_PERIOD)
        along = sum(_box_overlap(k * DASH_PERIOD, k * DASH_PERIOD + DASH_LENGTH, phase, fg_r) for k in (-1, 0, 1))
        along = np.where(fg_r > DASH_PERIOD, DASH_LENGTH / DASH_PERIOD, along)
        paint_r += _box_overlap(CENTRE_D - half, CENTRE_D + half, d_r, fl_r) * along
        paint = np.zeros_like(dd)
        paint[on_road] = np.clip(paint_r, 0.0, 1.0) * 0.92
        # colour = ((1-paint) * surface + paint * PAINT) * (1-haze) + haze * HAZE, the surface being
        # a coverage-weighted mix of grass, gravel and asphalt, each modulated by the grain:
        # one (N, 8) @ (8, 3) product.
        haze = self.haze_ground[:, 0]
        keep = (1.0 - paint) * (1.0 - haze)
        weights = np.empty((len(dd), 8), np.float32)
        weights[:, 2] = cov_road * keep
        weights[:, 1] = cov_shoulder * (keep - weights[:, 2])
        weights[:, 0] = keep - weights[:, 1] - weights[:, 2]
        weights[:, 3:6] = weights[:, 0:3] * grain[:, None]
        weights[:, 6] = paint * (1.0 - haze)
        weights[:, 7] = haze
        colour = np.einsum("nk,kc->nc", weights, _GROUND_PALETTE)
        img[self.ground_idx] = colour

    def _objects(self, t: float, position: np.ndarray, w2o: np.ndarray) -> tuple[PILImage.Image, PILImage.Image]:
        """A 1x shadow mask and a supersampled RGBA overlay with the shaded cuboids."""
        cam = self.cam
        ss = _SUPERSAMPLE
        overlay = PILImage.new("RGBA", (cam.width * ss, cam.height * ss), (0, 0, 0, 0))
        shadow = PILImage.new("L", (cam.width, cam.height), 0)
        draw = ImageDraw.Draw(overlay)
        shadow_draw = ImageDraw.Draw(shadow)
        forward = w2o[2]
        visible = []
        for actor in self.sc.actors:
            if actor.static_xy is not None:
                rel = np.array([actor.static_xy[0] - position[0], actor.static_xy[1] - position[1], 0.0])
                if np.hypot(rel[0], rel[1]) > _FAR_M + 20.0 or forward @ rel < -25.0:
                    continue
            ax, ay, ayaw = actor.pose(t)
            rel = np.array([ax - position[0], ay - position[1], 0.0])
            dist = float(np.hypot(rel[0], rel[1]))
            if dist > _FAR_M or forward @ rel < -25.0:
                continue
            visible.append((dist, ax, ay, ayaw, actor))
        visible.sort(key=lambda item: -item[0])
        for dist, ax, ay, ayaw, actor in visible:
            rot = np.array([[math.cos(ayaw), -math.sin(ayaw), 0], [math.sin(ayaw), math.cos(ayaw), 0], [0, 0, 1]])
            origin = np.array([ax, ay, 0.0])
            self._shadow(shadow_draw, actor, rot, origin, position, w2o)
            haze = 1.0 - math.exp(-dist / _HAZE_M)
            for index, (centre, size, colour) in enumerate(actor.parts):
                self._cuboid(
                    draw,
                    actor,
                    index,
                    np.array(centre),
                    np.array(size),
                    colour,
                    rot,
                    origin,
                    position,
                    w2o,
                    haze,
                )
        return shadow, overlay

    def _project(self, points_world: np.ndarray, position: np.ndarray, w2o: np.ndarray, scale: float):
        """Clip a planar polygon (N, 3) against the near plane and project it to pixels."""
        cam = self.cam
        pts = (points_world - position) @ w2o.T
        inside = pts[:, 2] >= _NEAR_M
        if not inside.any():
            return None
        if not inside.all():
            clipped = []
            n = len(pts)
            for i in range(n):
                a, b = pts[i], pts[(i + 1) % n]
                ina, inb = a[2] >= _NEAR_M, b[2] >= _NEAR_M
                if ina:
                    clipped.append(a)
                if ina != inb:
                    f = (_NEAR_M - a[2]) / (b[2] - a[2])
                    clipped.append(a + f * (b - a))
            pts = np.array(clipped)
        u = (cam.fx * pts[:, 0] / pts[:, 2] + cam.cx + 0.5) * scale
        v = (cam.fy * pts[:, 1] / pts[:, 2] + cam.cy + 0.5) * scale
        if u.max() < 0 or v.max() < 0 or u.min() > cam.width * scale or v.min() > cam.height * scale:
            return None
        return list(zip(u.tolist(), v.tolist(), strict=True))

    def _shadow(self, draw, actor: _Actor, rot, origin, position, w2o) -> None:
        xs = [c[0] - s[0] / 2 for c, s, _ in actor.parts] + [c[0] + s[0] / 2 for c, s, _ in actor.parts]
        ys = [c[1] - s[1] / 2 for c, s, _ in actor.parts] + [c[1] + s[1] / 2 for c, s, _ in actor.parts]
        x0, x1, y0, y1 = min(xs) - 0.15, max(xs) + 0.15, min(ys) - 0.15, max(ys) + 0.15
        corners = np.array([[x0, y0, 0.01], [x1, y0, 0.01], [x1, y1, 0.01], [x0, y1, 0.01]]) @ rot.T + origin
        corners[:, :2] -= _SUN[:2] * 0.35
        poly = self._project(corners, position, w2o, 1.0)
        if poly is not None and len(poly) >= 3:
            draw.polygon(poly, fill=255)

    def _cuboid(self, draw, actor, index, centre, size, colour, rot, origin, position, w2o, haze) -> None:
        half = size / 2
        base = np.array(colour)
        for face_id, (axis, sign, ua, va) in enumerate(_FACES):
            normal_local = np.zeros(3)
            normal_local[axis] = sign
            normal = rot @ normal_local
            face_centre = rot @ (centre + normal_local * half) + origin
            if normal @ (position - face_centre) <= 0:
                continue
            shade = 0.5 + 0.5 * max(0.0, float(normal @ _SUN))
            quads = [((-1.0, 1.0, -1.0, 1.0), base)]
            quads += [(r, np.array(c)) for part, face, r, c in actor.decals if part == index and face == face_id]
            for k, (rect, rgb) in enumerate(quads):
                local = _face_quad(centre, half, normal_local, ua, va, rect, lift=0.005 * k)
                poly = self._project(local @ rot.T + origin, position, w2o, float(_SUPERSAMPLE))
                if poly is None or len(poly) < 3:
                    continue
                shaded = rgb * shade * (1 - haze) + _HAZE * haze
                fill = (*(int(np.clip(c * 255 + 0.5, 0, 255)) for c in shaded), 255)
                draw.polygon(poly, fill=fill)


def _face_quad(
    centre: np.ndarray,
    half: np.ndarray,
    normal: np.ndarray,
    ua: int,
    va: int,
    rect: tuple[float, float, float, float],
    lift: float,
) -> np.ndarray:
    """Corners (4, 3) of the rectangle ``rect`` (fractions -1..1 along u, v) on a cuboid face."""
    u0, u1, v0, v1 = rect
    corners = np.tile(centre + normal * (half + lift), (4, 1))
    for row, (fu, fv) in enumerate(((u0, v0), (u1, v0), (u1, v1), (u0, v1))):
        corners[row, ua] = centre[ua] + fu * half[ua]
        corners[row, va] = centre[va] + fv * half[va]
    return corners


def _sky_panorama(clouds: np.ndarray, rows: int, cols: int, pixels_per_rad: float) -> np.ndarray:
    """Sky colours (rows = elevation from the horizon up, cols = world azimuth) with a cloud deck."""
    elevation = (np.arange(rows) / pixels_per_rad)[:, None]
    azimuth = (np.arange(cols) / cols * 2 * math.pi)[None, :]
    sin_e = np.maximum(np.sin(elevation), 1e-3)
    reach = np.cos(elevation) / sin_e * 22.0  # where the ray meets the cloud deck, in texels
    cover = _sample(clouds, reach * np.cos(azimuth), reach * np.sin(azimuth))
    cover = np.clip((cover - 0.52) / 0.22, 0.0, 1.0) * np.clip((elevation - 0.03) / 0.15, 0.0, 1.0)
    mix = np.sqrt(np.clip(np.sin(elevation), 0.0, 1.0))
    base = _SKY_HORIZON * (1 - mix[..., None]) + _SKY_ZENITH * mix[..., None]
    white = np.array([0.97, 0.97, 0.98], np.float32)
    return (base * (1 - cover[..., None]) + white * cover[..., None]).astype(np.float32)


def render_frames(
    seconds: float = 25.0,
    seed: int = 0,
    width: int = 960,
    height: int = 540,
    stamps_s: Sequence[float] = (0.0,),
) -> list[np.ndarray]:
    """Render camera images (uint8 RGB) of the sample drive at the given times (seconds)."""
    renderer = _Renderer(_Scenario(seconds, seed), width, height)
    return [renderer.render(float(t)) for t in stamps_s]


# --------------------------------------------------------------------------------------------
# Bag writing


@dataclass(frozen=True)
class SampleBag:
    """What :func:`make_sample_bag` wrote."""

    path: Path
    size_bytes: int
    counts: dict[str, int]
    seconds: float
    elapsed_s: float
    track: DriveTrack


def _time_msg(stamp_ns: int):
    from builtin_interfaces.msg import Time

    return Time(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)


def make_sample_bag(
    out_dir: str | Path,
    *,
    seconds: float = 25.0,
    seed: int = 0,
    width: int = 960,
    height: int = 540,
    raw: bool = False,
    camera_rate_hz: float = CAMERA_RATE_HZ,
    jpeg_quality: int = 75,
    overwrite: bool = False,
    start_ns: int = DEFAULT_START_NS,
    progress: Callable[[int, int], None] | None = None,
) -> SampleBag:
    """Render the drive and write it as a rosbag2 MCAP folder at ``out_dir``."""
    from geometry_msgs.msg import AccelWithCovarianceStamped
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import CameraInfo, CompressedImage, Image
    from std_msgs.msg import String

    from wam_diff2_ros.bag import BagWriter

    if width < 64 or height < 48 or width > 4096 or height > 4096:
        raise ValueError(f"image size {width}x{height} is outside 64x48 .. 4096x4096")
    if not 1 <= jpeg_quality <= 100:
        raise ValueError(f"jpeg_quality must be 1..100, not {jpeg_quality}")
    t_start = time.perf_counter()
    sc = _Scenario(seconds, seed)
    track = _track(sc, ODOM_RATE_HZ, COMMAND_RATE_HZ, start_ns)
    renderer = _Renderer(sc, width, height)
    cam = renderer.cam
    image_key = "image_raw" if raw else "image_compressed"
    camera_offsets = _tick_offsets_ns(sc.seconds, camera_rate_hz, CAMERA_PHASE_S)

    events: list[tuple[int, int, str, int]] = []  # stamp, tie-break order, kind, index
    events += [(int(s), 0, "odometry", i) for i, s in enumerate(track.stamps_ns)]
    events += [(int(s), 1, "acceleration", i) for i, s in enumerate(track.stamps_ns)]
    events += [(int(track.command_stamps_ns[i]), 2, "command", i) for i in range(len(track.commands))]
    events += [(start_ns + int(o), 3, "camera", i) for i, o in enumerate(camera_offsets)]
    events.sort()

    custom = {
        "generator": "wam_diff2_ros.tools.sample_drive",
        "seed": str(seed),
        "seconds": f"{sc.seconds:g}",
        "image_size": f"{width}x{height}",
        "left_turn_radius_m": f"{sc.turn_radius:.3f}",
    }
    with BagWriter(out_dir, overwrite=overwrite, custom_data=custom, compress=True) as bag:
        for key in (image_key, "camera_info", "odometry", "acceleration", "command"):
            bag.add_topic(SAMPLE_TOPICS[key], SAMPLE_TYPES[key])
        info = CameraInfo()
        info.header.frame_id = CAMERA_FRAME
        info.width, info.height = cam.width, cam.height
        info.distortion_model = "plumb_bob"
        info.d = [0.0] * 5
        info.k = cam.k
        info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        info.p = cam.p
        pose_cov = np.diag([0.02**2, 0.02**2, 1e-4, 1e-4, 1e-4, 0.002**2]).ravel().tolist()
        twist_cov = np.diag([0.05**2, 0.02**2, 1e-4, 1e-4, 1e-4, 0.005**2]).ravel().tolist()
        accel_cov = np.diag([0.05**2, 0.05**2, 0.05**2, 1e-3, 1e-3, 1e-3]).ravel().tolist()
        done = 0
        for stamp, _, kind, i in events:
            if kind == "odometry":
                msg = Odometry()
                msg.header.stamp = _time_msg(stamp)
                msg.header.frame_id = ODOM_FRAME
                msg.child_frame_id = BASE_FRAME
                msg.pose.pose.position.x = float(track.x[i])
                msg.pose.pose.position.y = float(track.y[i])
                msg.pose.pose.orientation.z = math.sin(float(track.yaw[i]) / 2)
                msg.pose.pose.orientation.w = math.cos(float(track.yaw[i]) / 2)
                msg.pose.covariance = pose_cov
                msg.twist.twist.linear.x = float(track.speed[i])
                msg.twist.twist.angular.z = float(track.yaw_rate[i])
                msg.twist.covariance = twist_cov
                bag.write(SAMPLE_TOPICS["odometry"], msg, stamp)
            elif kind == "acceleration":
                msg = AccelWithCovarianceStamped()
                msg.header.stamp = _time_msg(stamp)
                msg.header.frame_id = BASE_FRAME
                msg.accel.accel.linear.x = float(track.accel_x[i])
                msg.accel.accel.linear.y = float(track.accel_y[i])
                msg.accel.accel.angular.z = float(track.yaw_accel[i])
                msg.accel.covariance = accel_cov
                bag.write(SAMPLE_TOPICS["acceleration"], msg, stamp)
            elif kind == "command":
                bag.write(SAMPLE_TOPICS["command"], String(data=track.commands[i]), stamp)
            else:
                pixels = renderer.render((stamp - start_ns) / 1e9)
                if raw:
                    img = Image()
                    img.header.stamp = _time_msg(stamp)
                    img.header.frame_id = CAMERA_FRAME
                    img.height, img.width = cam.height, cam.width
                    img.encoding = "rgb8"
                    img.is_bigendian = 0
                    img.step = cam.width * 3
                    img.data = pixels.tobytes()
                else:
                    buffer = io.BytesIO()
                    PILImage.fromarray(pixels, "RGB").save(buffer, "JPEG", quality=jpeg_quality, optimize=True)
                    img = CompressedImage()
                    img.header.stamp = _time_msg(stamp)
                    img.header.frame_id = CAMERA_FRAME
                    img.format = "jpeg"
                    img.data = buffer.getvalue()
                bag.write(SAMPLE_TOPICS[image_key], img, stamp)
                info.header.stamp = _time_msg(stamp)
                bag.write(SAMPLE_TOPICS["camera_info"], info, stamp)
                done += 1
                if progress is not None:
                    progress(done, len(camera_offsets))
        counts = dict(bag.counts)
    size = sum(p.stat().st_size for p in Path(out_dir).rglob("*") if p.is_file())
    return SampleBag(Path(out_dir), size, counts, sc.seconds, time.perf_counter() - t_start, track)


def main(argv: Sequence[str] | None = None) -> int:
    """``wam-diff2-make-sample-bag OUT_DIR [--seconds 25] [--seed 0] [--width 960 --height 540] [--raw]``."""
    parser = argparse.ArgumentParser(
        prog="wam-diff2-make-sample-bag",
        description="Write a deterministic synthetic drive (front camera, odometry, acceleration, "
        "navigation command) as a rosbag2 MCAP folder.",
    )
    parser.add_argument("out_dir", type=Path, help="bag folder to create (must not exist unless --overwrite)")
    parser.add_argument("--seconds", type=float, default=25.0, help="drive length in seconds (default 25)")
    parser.add_argument("--seed", type=int, default=0, help="scenario seed (default 0)")
    parser.add_argument("--width", type=int, default=960, help="image width (default 960)")
    parser.add_argument("--height", type=int, default=540, help="image height (default 540)")
    parser.add_argument("--raw", action="store_true", help="write sensor_msgs/Image rgb8 instead of JPEG")
    parser.add_argument("--camera-rate", type=float, default=CAMERA_RATE_HZ, help="camera rate in Hz (default 10)")
    parser.add_argument("--quality", type=int, default=75, help="JPEG quality 1-100 (default 75)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing bag folder")
    args = parser.parse_args(argv)
    from wam_diff2_ros.bag import BagError

    def progress(done: int, total: int) -> None:
        if done % 25 == 0 or done == total:
            print(f"\r  rendered {done}/{total} frames", end="", file=sys.stderr, flush=True)

    try:
        result = make_sample_bag(
            args.out_dir,
            seconds=args.seconds,
            seed=args.seed,
            width=args.width,
            height=args.height,
            raw=args.raw,
            camera_rate_hz=args.camera_rate,
            jpeg_quality=args.quality,
            overwrite=args.overwrite,
            progress=progress,
        )
    except (ValueError, BagError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(file=sys.stderr)
    track = result.track
    size_mb = result.size_bytes / 1e6
    print(f"wrote {result.path} ({size_mb:.2f} MB, {result.seconds:g} s) in {result.elapsed_s:.1f} s")
    for topic, count in sorted(result.counts.items()):
        print(f"  {topic}: {count} messages")
    entry = (track.turn_entry_ns - track.start_ns) / 1e9
    exit_ = (track.turn_exit_ns - track.start_ns) / 1e9
    print(f"  left turn (radius {track.turn_radius_m:.1f} m) from t={entry:.1f} s to t={exit_:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
