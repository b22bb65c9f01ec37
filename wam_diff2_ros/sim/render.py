"""A small software 3-D renderer for the sample drive's camera frames (:func:`render_frames`): ground, sky,
cuboid actors, haze, supersampled.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from wam_diff2_ros.sim.ground import FAR_M, HAZE_COLOUR, HAZE_M, GroundShader
from wam_diff2_ros.sim.road import CAMERA_PITCH_RAD, CAMERA_X_M, CAMERA_Z_M, HORIZONTAL_FOV_RAD
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
_SUN = np.array([0.45, 0.35, 0.82]) / np.linalg.norm([0.45, 0.35, 0.82])
_NEAR_M = 0.25
_SUPERSAMPLE = 2

# Unit cube faces: (axis, sign, tangent u axis, tangent v axis).
_FACES = ((0, 1, 1, 2), (0, -1, 1, 2), (1, 1, 0, 2), (1, -1, 0, 2), (2, 1, 0, 1), (2, -1, 0, 1))


def default_threads() -> int:
    """The renderer's threads unless told: 2 where the machine has 2 cores or more, fewer where
    ``OMP_NUM_THREADS`` asks for fewer (as Ray does for its one-CPU workers)."""
    threads = min(2, os.cpu_count() or 1)
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(threads, int(omp))) if omp.isdigit() else threads


def _next(chunks: Iterator, lock: threading.Lock):
    with lock:
        return next(chunks, None)


def _to_uint8(frame: np.ndarray, image: np.ndarray, rows: slice) -> None:
    """``image[rows]`` (H, W, 3) uint8 from ``frame[:, rows]`` (3, H, W) float32 (0..1, clipped; changed)."""
    band = frame[:, rows]
    np.clip(band, 0.0, 1.0, out=band)
    band *= 255.0
    band += 0.5
    cv2.merge([plane.astype(np.uint8) for plane in band], dst=image[rows])


class Renderer:
    """Renders the front camera: per-pixel sky and ground (:class:`~wam_diff2_ros.sim.ground.GroundShader`), then
    shaded cuboids as polygons. The ground's chunks are shaded on ``threads`` threads (the caller's and a small
    pool of its own, made at first use; numpy lets go of the GIL in its loops) while the caller also draws the
    cuboids, and so is the uint8 conversion: the frames are the same for any number of threads. One instance is for
    one thread at a time (it keeps its canvases and caches from frame to frame)."""

    def __init__(self, sc: Scenario, width: int, height: int, threads: int | None = None) -> None:
        self.threads = default_threads() if threads is None else threads
        if self.threads < 1:
            raise ValueError(f"the renderer needs at least 1 thread, not {threads}")
        self._pool: tuple[int, futures.ThreadPoolExecutor] | None = None  # (the pid it was made in, the pool)
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
        self.ground = GroundShader(ground, t, dx, dy, dz, self.cam.fx, sc.ground_texture)
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
        # Where the static actors stand (moving ones: 0, 0; the quick test in _objects is for static ones only).
        self.static_xy = np.array([a.static_xy or (0.0, 0.0) for a in sc.actors], float).reshape(-1, 2)
        self._geometry_cache: dict[int, tuple[tuple[float, float, float], tuple[np.ndarray, list]]] = {}
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
        sky_done = threading.Event()

        def shade(chunk: tuple) -> None:
            if self.ground.g0 + chunk[0] < self.sky_end:
                sky_done.wait()  # the sky writes all of its range, the ground pixels of its last rows included
            self.ground.shade(planes, chunk, self.sc.road, (ex, ey, eyaw, ego_s))

        def sky_then_draw() -> tuple:
            try:
                self._sky(planes, eyaw)
            finally:
                sky_done.set()
            return self._draw(t, position, w2o)

        # Bottom up, so that the chunks that reach into the sky's range come last.
        drawn = self._spread(shade, self.ground.chunks[::-1], sky_then_draw)
        frame = planes.reshape(3, cam.height, cam.width)
        self._blend(frame, *drawn)
        image = np.empty((cam.height, cam.width, 3), np.uint8)
        band = -(-cam.height // 4)  # rows
        self._spread(lambda top: _to_uint8(frame, image, slice(top, top + band)), range(0, cam.height, band))
        return image

    def _spread(self, task: Callable, items: Sequence, first: Callable | None = None):
        """``task(item)`` for every item, on the renderer's threads (the caller's and its pool's, each taking the
        next item left), the caller running ``first()`` before it takes any; returns what ``first`` returned."""
        queue, lock = iter(items), threading.Lock()

        def work() -> None:
            while (item := _next(queue, lock)) is not None:
                task(item)

        pool = self._helpers()
        helpers = [pool.submit(work) for _ in range(self.threads - 1)] if pool is not None else []
        try:
            result = None if first is None else first()
            work()
        finally:
            futures.wait(helpers)  # none of them runs on after this
        for helper in helpers:
            helper.result()
        return result

    def _helpers(self) -> futures.ThreadPoolExecutor | None:
        """The pool of ``threads - 1`` helper threads (made at first use, and again in a forked child)."""
        if self.threads == 1:
            return None
        if self._pool is None or self._pool[0] != os.getpid():
            self._pool = (os.getpid(), futures.ThreadPoolExecutor(self.threads - 1, "renderer"))
        return self._pool[1]

    def _sky(self, planes: np.ndarray, yaw: float) -> None:
        shift = round(yaw / (2 * math.pi) * self.pano_cols)
        offset = (self.col_min + shift) % self.pano_cols
        for plane, source in zip(planes, self.sky_planes, strict=True):
            np.take(source[offset:], self.sky_take, out=plane[: self.sky_end], mode="clip")

    def _draw(self, t: float, position: np.ndarray, w2o: np.ndarray):
        """The actors' ground shadows and supersampled cuboids, drawn and reduced to what :meth:`_blend` needs:
        the shadows' box and darkening mask (or None) and the covered pixels with their premultiplied RGBA."""
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
        mask = None if box is None else np.asarray(shadow.crop(box), np.float32) * (0.42 / 255.0)
        self._drawn = (box, _redraw(overlay, drawn[1], faces, _SUPERSAMPLE))
        if self._drawn[1] is None:
            return box, mask, None, None
        # Whole rows of the box (the canvas is clear outside it), so a pixel's index is its index in the frame.
        rows = (0, self._drawn[1][1], overlay.width, self._drawn[1][3])
        small = overlay.reduce(_SUPERSAMPLE, rows).convert("RGBA")
        packed = np.asarray(small).view("<u4").ravel()  # alpha in the high byte
        # Only the covered pixels change (a transparent one is black: frame * 1 + 0).
        covered = np.flatnonzero(packed > 0xFFFFFF)
        rgba = packed[covered].view(np.uint8).reshape(-1, 4).T.astype(np.float32) / 255.0
        return box, mask, covered + rows[1] // _SUPERSAMPLE * self.cam.width, rgba

    @staticmethod
    def _blend(frame: np.ndarray, box, mask, pixels, rgba) -> None:
        """Darken the shadows and blend in the cuboids (:meth:`_draw`'s) in ``frame`` (3, H, W)."""
        if box is not None:
            x0, y0, x1, y1 = box
            frame[:, y0:y1, x0:x1] *= 1.0 - mask
        if pixels is not None:
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
        maybe = (np.hypot(rel_xy[:, 0], rel_xy[:, 1]) <= FAR_M + 21.0) & (rel_xy @ forward[:2] >= -26.0)
        visible = []
        for index, actor in enumerate(self.sc.actors):
            if actor.static_xy is not None:
                if not maybe[index]:
                    continue
                rel = np.array([actor.static_xy[0] - position[0], actor.static_xy[1] - position[1], 0.0])
                if np.hypot(rel[0], rel[1]) > FAR_M + 20.0 or forward @ rel < -25.0:
                    continue
            ax, ay, ayaw = actor.pose(t)
            rel = np.array([ax - position[0], ay - position[1], 0.0])
            dist = float(np.hypot(rel[0], rel[1]))
            if dist > FAR_M or forward @ rel < -25.0:
                continue
            visible.append((dist, index, (ax, ay, ayaw), actor))
        visible.sort(key=lambda item: -item[0])
        shadows: list = []
        faces: list = []
        scale = float(_SUPERSAMPLE)
        for dist, index, pose, actor in visible:
            shadow, parts = self._geometry(index, pose, actor)
            poly = self._project(shadow, position, w2o, 1.0)
            if poly is not None and len(poly) >= 3:
                shadows.append(poly)
            haze = 1.0 - math.exp(-dist / HAZE_M)
            haze_rgb = (HAZE_COLOUR * haze).tolist()
            for normal, face_centre, shade, quads in parts:
                if normal @ (position - face_centre) <= 0:
                    continue
                for corners, rgb in quads:
                    poly = self._project(corners, position, w2o, scale)
                    if poly is None or len(poly) < 3:
                        continue
                    shaded = (c * shade * (1 - haze) + h for c, h in zip(rgb, haze_rgb, strict=True))
                    faces.append((poly, (*(int(min(max(c * 255 + 0.5, 0), 255)) for c in shaded), 255)))
        return shadows, faces

    def _geometry(self, index: int, pose: tuple[float, float, float], actor: Actor) -> tuple[np.ndarray, list]:
        """An actor's shadow corners and per face of each part: normal, centre, shade and the corners (world) and
        colour of its quads (the face, then its decals); kept while the actor's pose stays the same."""
        cached = self._geometry_cache.get(index)
        if cached is not None and cached[0] == pose:
            return cached[1]
        ax, ay, ayaw = pose
        rot = np.array([[math.cos(ayaw), -math.sin(ayaw), 0], [math.sin(ayaw), math.cos(ayaw), 0], [0, 0, 1]])
        origin = np.array([ax, ay, 0.0])
        xs = [c[0] - s[0] / 2 for c, s, _ in actor.parts] + [c[0] + s[0] / 2 for c, s, _ in actor.parts]
        ys = [c[1] - s[1] / 2 for c, s, _ in actor.parts] + [c[1] + s[1] / 2 for c, s, _ in actor.parts]
        x0, x1, y0, y1 = min(xs) - 0.15, max(xs) + 0.15, min(ys) - 0.15, max(ys) + 0.15
        shadow = np.array([[x0, y0, 0.01], [x1, y0, 0.01], [x1, y1, 0.01], [x0, y1, 0.01]]) @ rot.T + origin
        shadow[:, :2] -= _SUN[:2] * 0.35
        parts = []
        for part, (centre_, size, colour) in enumerate(actor.parts):
            centre, half = np.array(centre_), np.array(size) / 2
            for face_id, (axis, sign, ua, va) in enumerate(_FACES):
                normal_local = np.zeros(3)
                normal_local[axis] = sign
                normal = rot @ normal_local
                face_centre = rot @ (centre + normal_local * half) + origin
                shade = 0.5 + 0.5 * max(0.0, float(normal @ _SUN))
                quads = [((-1.0, 1.0, -1.0, 1.0), colour)]
                quads += [(r, c) for p, face, r, c in actor.decals if p == part and face == face_id]
                corners = [
                    (_face_quad(centre, half, normal_local, ua, va, rect, lift=0.005 * k) @ rot.T + origin, rgb)
                    for k, (rect, rgb) in enumerate(quads)
                ]
                parts.append((normal, face_centre, shade, [(c, [float(v) for v in rgb]) for c, rgb in corners]))
        self._geometry_cache[index] = (pose, (shadow, parts))
        return shadow, parts

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
