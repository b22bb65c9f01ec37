"""A small software 3-D renderer for the sample drive's camera frames (:func:`render_frames`): ground, sky,
cuboid actors, haze, supersampled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from wam_diff2_ros.sim.road import (
    ASPHALT_D,
    CAMERA_PITCH_RAD,
    CAMERA_X_M,
    CAMERA_Z_M,
    CENTRE_D,
    DASH_LENGTH,
    DASH_PERIOD,
    HORIZONTAL_FOV_RAD,
    LEFT_EDGE_D,
    LINE_WIDTH,
    RIGHT_EDGE_D,
    SHOULDER_D,
)
from wam_diff2_ros.sim.scenario import Actor, Scenario, sample_texture


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


class Renderer:
    """Renders the front camera: per-pixel sky and ground, then shaded cuboids as polygons."""

    def __init__(self, sc: Scenario, width: int, height: int) -> None:
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
        return (*self.camera_at(x, y, yaw), x, y, yaw)

    @staticmethod
    def camera_at(x: float, y: float, yaw: float) -> tuple[np.ndarray, np.ndarray]:
        """World camera position and world->optical rotation for the rear axle at ``(x, y, yaw)``."""
        cy_, sy_ = math.cos(yaw), math.sin(yaw)
        position = np.array([x + CAMERA_X_M * cy_, y + CAMERA_X_M * sy_, CAMERA_Z_M])
        # body->world: yaw then pitch (down); optical axes in body: z fwd, x right(-y), y down(-z).
        cp, sp = math.cos(CAMERA_PITCH_RAD), math.sin(CAMERA_PITCH_RAD)
        r_yaw = np.array([[cy_, -sy_, 0], [sy_, cy_, 0], [0, 0, 1]])
        r_pitch = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
        body_to_world = r_yaw @ r_pitch
        optical_in_body = np.array([[0, -1, 0], [0, 0, -1], [1, 0, 0]], float)  # rows: x, y, z optical
        world_to_optical = optical_in_body @ body_to_world.T
        return position, world_to_optical

    def render(self, t: float) -> np.ndarray:
        """The camera image (H, W, 3) uint8 at simulated time ``t`` seconds."""
        s = self.sc.s_at(t)
        x, y, yaw = (float(a[0]) for a in self.sc.ego_pose_at_s(np.atleast_1d(s)))
        return self.render_from(t, x, y, yaw, float(s))

    def render_from(self, t: float, ex: float, ey: float, eyaw: float, ego_s: float) -> np.ndarray:
        """The camera image (H, W, 3) uint8 at time ``t`` with the rear axle at ``(ex, ey, eyaw)`` (any pose:
        off the lane centre, off its heading); ``ego_s`` is its arc length along the road (where the road's
        segments are searched)."""
        cam = self.cam
        position, w2o = self.camera_at(ex, ey, eyaw)
        img = np.empty((cam.height * cam.width, 3), np.float32)
        self._sky(img, eyaw)
        self._ground(img, ex, ey, eyaw, ego_s)
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
        grain = (sample_texture(tex, wx * (1 / 1.6), wy * (1 / 1.6)) - 0.5) * 0.5
        close = self.close_idx  # fine grain only where a pixel covers less than its texel
        fine = sample_texture(tex, wx[close] * (1 / 0.22) + 97.0, wy[close] * (1 / 0.22) + 31.0)
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

    def _shadow(self, draw, actor: Actor, rot, origin, position, w2o) -> None:
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
    cover = sample_texture(clouds, reach * np.cos(azimuth), reach * np.sin(azimuth))
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
    renderer = Renderer(Scenario(seconds, seed), width, height)
    return [renderer.render(float(t)) for t in stamps_s]
