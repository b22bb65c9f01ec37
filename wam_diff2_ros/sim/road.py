"""The sample drive's road: frames, rates, lane geometry, and the road's centre line as curvature segments."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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

MAX_SECONDS = 120.0
TIME_DS = 0.01
PATH_DS = 0.05
LOOKAHEAD_S = 12.0  # ground truth (and the lead car) extend this far beyond the bag


@dataclass(frozen=True)
class Segment:
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
class Road:
    segments: tuple[Segment, ...]
    left_arc: tuple[float, float]  # s range of the left turn
    right_arc: tuple[float, float]

    @staticmethod
    def build(pieces: Sequence[tuple[float, float]]) -> Road:
        """Chain (length, curvature) pieces starting at the origin heading +x."""
        segs: list[Segment] = []
        x = y = yaw = s = 0.0
        for i, (length, kappa) in enumerate(pieces):
            seg = Segment(s, length, kappa, x, y, yaw, first=i == 0, last=i == len(pieces) - 1)
            segs.append(seg)
            xe, ye, yawe = seg.pose(np.array([s + length]))
            x, y, yaw, s = float(xe[0]), float(ye[0]), float(yawe[0]), s + length
        arcs = [(g.s0, g.s0 + g.length, g.curvature) for g in segs if g.curvature != 0.0]
        left = next(((a, b) for a, b, k in arcs if k > 0), (math.inf, math.inf))
        right = next(((a, b) for a, b, k in arcs if k < 0), (math.inf, math.inf))
        return Road(tuple(segs), left, right)

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
