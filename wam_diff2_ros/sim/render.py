"""A small software 3-D renderer for the sample drive's camera frames (:func:`render_frames`): ground, sky,
cuboid actors, haze, supersampled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from wam_diff2_ros.sim.cuboids import ActorGeometry, actor_geometry
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
_HAZE_M = 420.0
_NEAR_M = 0.25
_FAR_M = 170.0
_SUPERSAMPLE = 2

_CHUNK = 32768  # ground pixels per pass of the ground shader, so that its temporaries stay in the CPU cache


def _cover(lo: float, hi: float, near: np.ndarray, far: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Fraction of each pixel footprint [near, far] (of length ``width``) inside [lo, hi] (box-filtered edge)."""
    out = np.minimum(np.float32(hi), far)
    out -= np.maximum(np.float32(lo), near)
    out /= width
    np.clip(out, 0.0, 1.0, out=out)
    return out


def _bilinear(flat: np.ndarray, size: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """:func:`sample_texture` of the raveled padded texture ``flat`` (``size`` + 1 square), in place (``u``, ``v``
    are overwritten) and without index copies: the same arithmetic."""
    u0f, v0f = np.floor(u), np.floor(v)
    u -= u0f
    v -= v0f
    mask = size - 1
    idx = v0f.astype(np.int64)
    idx &= mask
    idx *= size + 1
    column = u0f.astype(np.int64)
    column &= mask
    idx += column
    top = flat.take(idx, mode="clip")
    step = flat[1:].take(idx, out=u0f, mode="clip")
    step -= top
    step *= u
    top += step
    bottom = flat[size + 1 :].take(idx, mode="clip")
    step = flat[size + 2 :].take(idx, out=v0f, mode="clip")
    step -= bottom
    step *= u
    bottom += step
    bottom -= top
    bottom *= v
    top += bottom
    return top


class Renderer:
    """Renders the front camera: per-pixel sky and ground, then shaded cuboids as polygons.

    Without camera roll the ground is the image's last rows, so the ground shader runs on the flat pixel range
    from the first ground pixel to the end (a few sky pixels of its first row are shaded and then not written),
    in chunks, and the colour planes are converted to the interleaved uint8 image at the end."""

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
        dx, dy, dz = (dx / norm).ravel(), (by / norm).ravel(), (dz / norm).ravel()
        ground = dz < -1e-3
        t = np.where(ground, CAMERA_Z_M / np.maximum(-dz, 1e-3), np.inf)
        ground &= t < 3000.0
        pixels = width * height
        # The shaded range [g0, pixels): every ground pixel, and sky pixels given a stand-in distance.
        self.g0 = g0 = int(np.argmax(ground)) if ground.any() else pixels
        self.is_ground = ground[g0:]
        tg = np.where(self.is_ground, t[g0:], 10.0)
        f32 = np.float32
        self.gx = (CAMERA_X_M + tg * dx[g0:]).astype(f32)
        self.gy = (tg * dy[g0:]).astype(f32)
        self.fp_lat = np.maximum(tg / self.cam.fx, 1e-3).astype(f32)
        self.fp_long = np.maximum(tg / (self.cam.fx * np.maximum(-dz[g0:], 1e-3)), 1e-3).astype(f32)
        self.half_lat, self.half_long = self.fp_lat * f32(0.5), self.fp_long * f32(0.5)
        self.haze = (1 - np.exp(-tg / _HAZE_M)).astype(f32)
        self.clear = 1.0 - self.haze
        self.haze_colour = [self.haze * _GROUND_PALETTE[7, c] for c in range(3)]
        self.near = tg < _FAR_M * 1.6
        close = self.fp_long < 0.25  # fine grain only where a pixel covers less than its texel
        self.fine_amp = np.where(close, 1.0 - self.fp_long / 0.25, 0.0).astype(f32)
        self.dashes_blur = self.fp_long > DASH_PERIOD
        bounds = range(0, pixels - g0, _CHUNK)
        self.chunks = [
            (a, min(a + _CHUNK, pixels - g0), close[a : a + _CHUNK].any(), self.is_ground[a : a + _CHUNK].all())
            for a in bounds
        ]
        # The sky depends on the heading only: precompute a panorama (azimuth x elevation) at about one camera
        # pixel per sample, widened so that a heading's window never wraps, and take it per frame.
        self.sky_end = int(np.flatnonzero(~ground)[-1]) + 1 if not ground.all() else 0
        sky = ~ground[: self.sky_end]
        elevation = np.arcsin(np.clip(dz[: self.sky_end], -1.0, 1.0))
        azimuth = np.arctan2(dy[: self.sky_end], dx[: self.sky_end])
        self.pano_cols = round(2 * math.pi * self.cam.fx)
        rows = math.ceil(max(float(elevation[sky].max(initial=0.0)), 0.0) * self.cam.fx) + 2
        sky_row = np.where(sky, np.clip(np.round(elevation * self.cam.fx), 0, rows - 1), 0).astype(np.int64)
        sky_col = np.where(sky, np.round(azimuth / (2 * math.pi) * self.pano_cols), 0).astype(np.int64)
        self.col_min = int(sky_col.min(initial=0))
        span = int(sky_col.max(initial=0)) - self.col_min + 1
        panorama = _sky_panorama(sc.cloud_texture, rows, self.pano_cols, self.cam.fx)
        wide = panorama[:, np.arange(self.pano_cols + span) % self.pano_cols]
        self.sky_planes = [np.ascontiguousarray(wide[:, :, c]).ravel() for c in range(3)]
        self.sky_take = sky_row * wide.shape[1] + (sky_col - self.col_min)
        self.texture = (sc.ground_texture.ravel(), sc.ground_texture.shape[0] - 1)
        # Where the static actors stand (moving ones: 0, 0; the quick test in _objects is for static ones only).
        self.static_xy = np.array([a.static_xy or (0.0, 0.0) for a in sc.actors], float).reshape(-1, 2)
        self._geometry_cache: dict[int, tuple[tuple[float, float, float], ActorGeometry]] = {}
        self._canvas: tuple[PILImage.Image, PILImage.Image] | None = None
        self._drawn: tuple[tuple[int, int, int, int] | None, tuple[int, int, int, int] | None] = (None, None)

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
        planes = np.empty((3, cam.height * cam.width), np.float32)
        self._sky(planes, eyaw)
        self._ground(planes, ex, ey, eyaw, ego_s)
        self._composite(planes.reshape(3, cam.height, cam.width), t, position, w2o)
        np.clip(planes, 0.0, 1.0, out=planes)
        planes *= 255.0
        planes += 0.5
        return cv2.merge([plane.reshape(cam.height, cam.width).astype(np.uint8) for plane in planes])

    def _sky(self, planes: np.ndarray, yaw: float) -> None:
        shift = round(yaw / (2 * math.pi) * self.pano_cols)
        offset = (self.col_min + shift) % self.pano_cols
        for plane, source in zip(planes, self.sky_planes, strict=True):
            np.take(source[offset:], self.sky_take, out=plane[: self.sky_end], mode="clip")

    def _ground(self, planes: np.ndarray, ex: float, ey: float, eyaw: float, ego_s: float) -> None:
        c, s = np.float32(math.cos(eyaw)), np.float32(math.sin(eyaw))
        flat, size = self.texture
        palette = _GROUND_PALETTE
        for a, b, any_close, all_ground in self.chunks:
            gx, gy = self.gx[a:b], self.gy[a:b]
            wx = np.float32(ex) + c * gx - s * gy
            wy = np.float32(ey) + s * gx + c * gy
            s_road, d_road = self.sc.road.project(wx, wy, ego_s, _FAR_M * 1.6)
            near = self.near[a:b]
            sx = np.where(near, s_road, 0.0)
            dd = np.where(near & np.isfinite(d_road), d_road, 1e6)
            grain = (_bilinear(flat, size, wx * (1 / 1.6), wy * (1 / 1.6)) - 0.5) * 0.5
            if any_close:
                fine = _bilinear(flat, size, wx * (1 / 0.22) + 97.0, wy * (1 / 0.22) + 31.0)
                grain += (fine - 0.5) * 0.35 * self.fine_amp[a:b]
            fp_lat, half_lat = self.fp_lat[a:b], self.half_lat[a:b]
            lo, hi = dd - half_lat, dd + half_lat
            cov_shoulder = _cover(SHOULDER_D[0], SHOULDER_D[1], lo, hi, fp_lat)
            cov_road = _cover(ASPHALT_D[0], ASPHALT_D[1], lo, hi, fp_lat)
            paint = self._paint(dd, lo, hi, sx, a, b)
            # colour = ((1-paint) * surface + paint * PAINT) * (1-haze) + haze * HAZE, the surface being
            # a coverage-weighted mix of grass, gravel and asphalt, each modulated by the grain: the weights'
            # products with the palette summed in order (bit for bit an (N, 8) @ (8, 3) einsum).
            clear = self.clear[a:b]
            keep = (1.0 - paint) * clear
            w2 = cov_road * keep
            w1 = cov_shoulder * (keep - w2)
            weights = (keep - w1 - w2, w1, w2)
            weights = (*weights, *(w * grain for w in weights), paint * clear)
            for channel in range(3):
                target = planes[channel, self.g0 + a : self.g0 + b]
                colour = np.multiply(weights[0], palette[0, channel], out=target if all_ground else None)
                for k in range(1, 7):
                    colour += weights[k] * palette[k, channel]
                colour += self.haze_colour[channel][a:b]
                if not all_ground:
                    np.copyto(target, colour, where=self.is_ground[a:b])

    def _paint(self, dd: np.ndarray, lo: np.ndarray, hi: np.ndarray, sx: np.ndarray, a: int, b: int) -> np.ndarray:
        """Coverage of the lane lines (edges solid, centre dashed) times 0.92 on the road, else 0. Worked out only
        where a footprint [lo, hi] touches a line: elsewhere every line's coverage, and so the paint, is 0."""
        half = LINE_WIDTH / 2
        touch = np.zeros(dd.shape, bool)
        for line in (RIGHT_EDGE_D, LEFT_EDGE_D, CENTRE_D):
            touch |= (lo < np.float32(line + half)) & (hi > np.float32(line - half))
        touch &= (dd > RIGHT_EDGE_D - 1.0) & (dd < LEFT_EDGE_D + 1.0)
        paint = np.zeros_like(dd)
        pick = np.flatnonzero(touch)
        if len(pick) == 0:
            return paint
        lo, hi, sx = lo[pick], hi[pick], sx[pick]
        fp_lat, fp_long, half_long = self.fp_lat[a:b][pick], self.fp_long[a:b][pick], self.half_long[a:b][pick]
        covered = _cover(RIGHT_EDGE_D - half, RIGHT_EDGE_D + half, lo, hi, fp_lat)
        covered += _cover(LEFT_EDGE_D - half, LEFT_EDGE_D + half, lo, hi, fp_lat)
        phase = np.mod(sx, DASH_PERIOD)
        start, end = phase - half_long, phase + half_long
        along = _cover(-DASH_PERIOD, DASH_LENGTH - DASH_PERIOD, start, end, fp_long)
        along += _cover(0.0, DASH_LENGTH, start, end, fp_long)
        along += _cover(DASH_PERIOD, DASH_PERIOD + DASH_LENGTH, start, end, fp_long)
        along = np.where(self.dashes_blur[a:b][pick], DASH_LENGTH / DASH_PERIOD, along)
        covered += _cover(CENTRE_D - half, CENTRE_D + half, lo, hi, fp_lat) * along
        np.clip(covered, 0.0, 1.0, out=covered)
        paint[pick] = covered * 0.92
        return paint

    def _composite(self, frame: np.ndarray, t: float, position: np.ndarray, w2o: np.ndarray) -> None:
        """Darken the actors' ground shadows and blend in the supersampled cuboids, in ``frame`` (3, H, W)."""
        shadows, faces = self._objects(t, position, w2o)
        if self._canvas is None:
            cam, ss = self.cam, _SUPERSAMPLE
            shadow = PILImage.new("L", (cam.width, cam.height), 0)
            # The faces are opaque and the rest black and transparent, so the canvas is premultiplied as it is
            # ("RGBa": reduce() then box-filters it without converting from "RGBA" first).
            self._canvas = (shadow, PILImage.new("RGBa", (cam.width * ss, cam.height * ss), (0, 0, 0, 0)))
        shadow, overlay = self._canvas
        drawn, self._drawn = self._drawn, ((0, 0, *shadow.size), (0, 0, *overlay.size))  # all, until both are done
        box = _redraw(shadow, drawn[0], [(poly, 255) for poly in shadows], 1)
        if box is not None:
            x0, y0, x1, y1 = box
            mask = np.asarray(shadow.crop(box), np.float32) * (0.42 / 255.0)
            frame[:, y0:y1, x0:x1] *= 1.0 - mask
        self._drawn = (box, _redraw(overlay, drawn[1], faces, _SUPERSAMPLE))
        if self._drawn[1] is not None:
            # The box's corners are multiples of the supersampling, so its reduction is that of the whole canvas.
            x0, y0 = (corner // _SUPERSAMPLE for corner in self._drawn[1][:2])
            small = overlay.reduce(_SUPERSAMPLE, self._drawn[1]).convert("RGBA")
            packed = np.asarray(small).view("<u4").ravel()  # alpha in the high byte
            # Only the covered pixels change (a transparent one is black: frame * 1 + 0).
            covered = np.flatnonzero(packed > 0xFFFFFF)
            rgba = packed[covered].view(np.uint8).reshape(-1, 4).T.astype(np.float32) / 255.0
            row, column = np.divmod(covered, small.width)
            pixels = (row + y0) * frame.shape[2] + (column + x0)
            alpha = 1.0 - rgba[3]
            for channel, plane in enumerate(frame.reshape(3, -1)):
                blended = plane.take(pixels)
                blended *= alpha
                blended += rgba[channel]
                plane.put(pixels, blended)

    def _objects(self, t: float, position: np.ndarray, w2o: np.ndarray) -> tuple[list, list]:
        """The shadow polygons (image pixels) and the shaded cuboid faces (polygon, RGBA fill; supersampled
        pixels) of the actors in view, far to near."""
        forward = w2o[2]
        # Static actors surely out of reach (a margin of 1 m over the exact test below) are skipped at once.
        rel_xy = self.static_xy - position[:2]
        maybe = (np.hypot(rel_xy[:, 0], rel_xy[:, 1]) <= _FAR_M + 21.0) & (rel_xy @ forward[:2] >= -26.0)
        visible = []
        for index, actor in enumerate(self.sc.actors):
            if actor.static_xy is not None:
                if not maybe[index]:
                    continue
                rel = np.array([actor.static_xy[0] - position[0], actor.static_xy[1] - position[1], 0.0])
                if np.hypot(rel[0], rel[1]) > _FAR_M + 20.0 or forward @ rel < -25.0:
                    continue
            ax, ay, ayaw = actor.pose(t)
            rel = np.array([ax - position[0], ay - position[1], 0.0])
            dist = float(np.hypot(rel[0], rel[1]))
            if dist > _FAR_M or forward @ rel < -25.0:
                continue
            visible.append((dist, index, (ax, ay, ayaw), actor))
        visible.sort(key=lambda item: -item[0])
        shadows: list = []
        faces: list = []
        for dist, index, pose, actor in visible:
            geometry = self._geometry(index, pose, actor)
            poly = self._project(geometry.shadow, position, w2o, 1.0)
            if poly is not None and len(poly) >= 3:
                shadows.append(poly)
            faces += self._faces(geometry, dist, position, w2o)
        return shadows, faces

    def _faces(self, geometry: ActorGeometry, dist: float, position: np.ndarray, w2o: np.ndarray) -> list:
        """The quads of an actor's faces that look at the camera, projected (supersampled pixels) with their shaded
        RGBA fill, in the order of its parts, faces and decals. All quads in one matrix product; a quad that crosses
        the near plane is clipped by :meth:`_project`."""
        facing = np.einsum("fi,fi->f", geometry.normals, position - geometry.centres) > 0
        picked = np.flatnonzero(facing[geometry.quad_face])
        if len(picked) == 0:
            return []
        cam, scale = self.cam, float(_SUPERSAMPLE)
        pts = ((geometry.quad_corners[picked].reshape(-1, 3) - position) @ w2o.T).reshape(-1, 4, 3)
        x, y, z = pts[..., 0], pts[..., 1], pts[..., 2]
        inside = z >= _NEAR_M
        whole = inside.all(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            us = (cam.fx * x / z + cam.cx + 0.5) * scale
            vs = (cam.fy * y / z + cam.cy + 0.5) * scale
        on_screen = ~(
            (us.max(axis=1) < 0)
            | (vs.max(axis=1) < 0)
            | (us.min(axis=1) > cam.width * scale)
            | (vs.min(axis=1) > cam.height * scale)
        )
        haze = 1.0 - math.exp(-dist / _HAZE_M)
        shade = geometry.shades[geometry.quad_face[picked]][:, None]
        shaded = geometry.quad_rgb[picked] * shade * (1 - haze) + _HAZE * haze
        fills = np.clip(shaded * 255 + 0.5, 0, 255).astype(np.int64).tolist()
        us_, vs_, whole_, on_screen_ = us.tolist(), vs.tolist(), whole.tolist(), on_screen.tolist()
        any_inside = inside.any(axis=1).tolist()
        faces = []
        for row, quad in enumerate(picked.tolist()):
            if whole_[row]:
                if not on_screen_[row]:
                    continue
                poly = list(zip(us_[row], vs_[row], strict=True))
            elif any_inside[row]:
                poly = self._project(geometry.quad_corners[quad], position, w2o, scale)
                if poly is None or len(poly) < 3:
                    continue
            else:
                continue
            faces.append((poly, (*fills[row], 255)))
        return faces

    def _geometry(self, index: int, pose: tuple[float, float, float], actor: Actor) -> ActorGeometry:
        """:func:`actor_geometry`, kept while the actor's pose stays the same."""
        cached = self._geometry_cache.get(index)
        if cached is None or cached[0] != pose:
            cached = self._geometry_cache[index] = (pose, actor_geometry(pose, actor))
        return cached[1]

    def _project(self, points_world: np.ndarray, position: np.ndarray, w2o: np.ndarray, scale: float):
        """Clip a planar polygon (N, 3) against the near plane and project it to pixels."""
        cam = self.cam
        pts = ((points_world - position) @ w2o.T).tolist()
        inside = [p[2] >= _NEAR_M for p in pts]
        if not any(inside):
            return None
        if not all(inside):
            clipped = []
            n = len(pts)
            for i in range(n):
                a, b = pts[i], pts[(i + 1) % n]
                if inside[i]:
                    clipped.append(a)
                if inside[i] != inside[(i + 1) % n]:
                    f = (_NEAR_M - a[2]) / (b[2] - a[2])
                    clipped.append([ai + f * (bi - ai) for ai, bi in zip(a, b, strict=True)])
            pts = clipped
        fx, fy, cx, cy = cam.fx, cam.fy, cam.cx, cam.cy
        poly = [((fx * x / z + cx + 0.5) * scale, (fy * y / z + cy + 0.5) * scale) for x, y, z in pts]
        us, vs = [p[0] for p in poly], [p[1] for p in poly]
        if max(us) < 0 or max(vs) < 0 or min(us) > cam.width * scale or min(vs) > cam.height * scale:
            return None
        return poly


def _redraw(canvas: PILImage.Image, drawn: tuple[int, int, int, int] | None, polygons: list, align: int):
    """Clear ``drawn`` (the box the last frame drew in) on ``canvas``, draw ``(polygon, fill)`` in order and return
    the box they lie in (a margin around their vertices, clipped to the canvas, corners multiples of ``align``),
    or None. Transparent pixels leave the frame as it is, so any box around the drawn pixels blends the same."""
    if drawn is not None:
        canvas.paste(0, drawn)
    if not polygons:
        return None
    draw = ImageDraw.Draw(canvas)
    xs, ys = [], []
    for polygon, fill in polygons:
        draw.polygon(polygon, fill=fill)
        xs += [p[0] for p in polygon]
        ys += [p[1] for p in polygon]
    x0, y0 = max(0, math.floor(min(xs)) - 2) // align * align, max(0, math.floor(min(ys)) - 2) // align * align
    x1 = min(canvas.width, -(-(math.ceil(max(xs)) + 3) // align) * align)
    y1 = min(canvas.height, -(-(math.ceil(max(ys)) + 3) // align) * align)
    return (x0, y0, x1, y1) if x0 < x1 and y0 < y1 else None


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
