"""The sample drive's scenario: the ego's speed and path, the other actors, and the ground-truth track
(:func:`simulate_drive`, no rendering).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from wam_diff2_ros.sim.road import (
    CENTRE_D,
    COMMAND_LEAD_S,
    COMMAND_RATE_HZ,
    DEFAULT_START_NS,
    LANE_WIDTH,
    LEFT_EDGE_D,
    LOOKAHEAD_S,
    MAX_SECONDS,
    ODOM_RATE_HZ,
    PATH_DS,
    SHOULDER_D,
    TIME_DS,
    TRANSITION_M,
    Road,
)


def _raised_cosine(s: np.ndarray, s_a: float, s_b: float, v_a: float, v_b: float) -> tuple[np.ndarray, ...]:
    """Speed and dv/ds of a raised-cosine change from v_a at s_a to v_b at s_b."""
    u = np.clip((s - s_a) / (s_b - s_a), 0.0, 1.0)
    v = v_a + (v_b - v_a) * (1 - np.cos(np.pi * u)) / 2
    dv = np.where((s > s_a) & (s < s_b), (v_b - v_a) * np.pi * np.sin(np.pi * u) / (2 * (s_b - s_a)), 0.0)
    return v, dv


@dataclass(frozen=True)
class Actor:
    """A rigid object: cuboid parts (centre, size, rgb) in its own frame, and where it is when."""

    parts: tuple[tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]], ...]
    pose: Callable[[float], tuple[float, float, float]]  # t_s -> world x, y, yaw
    decals: tuple[tuple[int, int, tuple[float, float, float, float], tuple[float, float, float]], ...] = ()
    static_xy: tuple[float, float] | None = None  # for culling static objects cheaply


class Scenario:
    """Everything :func:`simulate_drive` and the renderer need, derived from the seed."""

    def __init__(self, seconds: float, seed: int) -> None:
        if not (0.0 < seconds <= MAX_SECONDS):
            raise ValueError(f"seconds must be in (0, {MAX_SECONDS:g}], not {seconds}")
        rng = np.random.default_rng(seed)
        self.seed = seed
        self.seconds = float(seconds)
        self.cruise = float(rng.uniform(7.6, 8.4))
        self.turn_speed = float(rng.uniform(4.2, 4.8))
        self.turn_radius = float(rng.uniform(18.0, 26.0))
        right_radius, right_angle = 90.0, math.radians(25.0)
        self.road = Road.build(
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
        s = np.arange(0.0, self.road.length, PATH_DS)
        kappa = (self.road.curvature_integral(s + half) - self.road.curvature_integral(s - half)) / TRANSITION_M
        yaw = np.concatenate([[0.0], np.cumsum((kappa[1:] + kappa[:-1]) / 2 * PATH_DS)])
        c, sn = np.cos(yaw), np.sin(yaw)
        x = np.concatenate([[0.0], np.cumsum((c[1:] + c[:-1]) / 2 * PATH_DS)])
        y = np.concatenate([[0.0], np.cumsum((sn[1:] + sn[:-1]) / 2 * PATH_DS)])
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
        s = np.arange(0.0, self.road.length, TIME_DS)
        inv_v = 1.0 / self.speed(s)[0]
        self.time_s = s
        self.time_t = np.concatenate([[0.0], np.cumsum((inv_v[1:] + inv_v[:-1]) / 2 * TIME_DS)])
        if self.time_t[-1] < self.seconds + LOOKAHEAD_S:
            raise ValueError(f"the road is too short for {self.seconds} s")

    def s_at(self, t: np.ndarray | float) -> np.ndarray:
        return np.interp(t, self.time_t, self.time_s)

    def t_at_s(self, s: float) -> float:
        return float(np.interp(s, self.time_s, self.time_t))

    # other actors ---------------------------------------------------------------------------
    def _build_actors(self, rng: np.random.Generator) -> list[Actor]:
        road = self.road
        actors: list[Actor] = []
        end_s = float(self.s_at(self.seconds)) + 160.0
        a0, a1 = road.left_arc

        def car_at(s: float, d: float, flip: bool, colour: tuple[float, float, float]) -> Actor:
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


def _car(colour, rng, pose, static_xy) -> Actor:
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
    return Actor(parts, pose, decals, static_xy)


def _pole(x: float, y: float, yaw: float) -> Actor:
    grey = (0.45, 0.46, 0.48)
    parts = (((0.0, 0.0, 3.5), (0.16, 0.16, 7.0), grey), ((0.0, 1.0, 6.95), (0.3, 2.0, 0.12), grey))
    return Actor(parts, lambda _t: (x, y, yaw), (), (x, y))


def _tree(x: float, y: float, rng: np.random.Generator) -> Actor:
    canopy = float(rng.uniform(2.5, 4.5))
    trunk_h = float(rng.uniform(1.8, 2.6))
    green = (float(rng.uniform(0.12, 0.22)), float(rng.uniform(0.30, 0.42)), float(rng.uniform(0.10, 0.16)))
    yaw = float(rng.uniform(0, math.pi / 2))
    parts = (
        ((0.0, 0.0, trunk_h + canopy * 0.45), (canopy, canopy, canopy * 0.9), green),
        ((0.0, 0.0, trunk_h / 2), (0.35, 0.35, trunk_h), (0.33, 0.23, 0.14)),
    )
    return Actor(parts, lambda _t: (x, y, yaw), (), (x, y))


def _building(x: float, y: float, yaw: float, size, rng: np.random.Generator) -> Actor:
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
    return Actor(parts, lambda _t: (x, y, yaw), tuple(decals), (x, y))


def _value_noise(rng: np.random.Generator, size: int, cell: int) -> np.ndarray:
    """Smooth, tileable noise in [0, 1] (size+1 square, see :func:`sample_texture`): a random lattice
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


def sample_texture(texture: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
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
    _scenario: Scenario | None = field(default=None, repr=False, compare=False)

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


def _kinematics(sc: Scenario, t: np.ndarray) -> dict[str, np.ndarray]:
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
    return drive_track(Scenario(seconds, seed), rate_hz, command_rate_hz, start_ns)


def drive_track(sc: Scenario, rate_hz: float, command_rate_hz: float, start_ns: int) -> DriveTrack:
    offsets = tick_offsets_ns(sc.seconds, rate_hz, 0.0)
    kin = _kinematics(sc, offsets / 1e9)
    a0, a1 = sc.road.left_arc
    entry_ns = start_ns + round(sc.t_at_s(a0) * 1e9)
    exit_ns = start_ns + round(sc.t_at_s(a1) * 1e9)
    command_stamps = start_ns + tick_offsets_ns(sc.seconds, command_rate_hz, 0.0)
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


def tick_offsets_ns(seconds: float, rate_hz: float, phase_s: float) -> np.ndarray:
    if rate_hz <= 0:
        raise ValueError(f"rates must be positive, not {rate_hz}")
    period_ns = round(1e9 / rate_hz)
    phase_ns = round(phase_s * 1e9)
    count = math.floor((seconds * 1e9 - phase_ns - 1) / period_ns) + 1
    return phase_ns + period_ns * np.arange(max(count, 0), dtype=np.int64)
