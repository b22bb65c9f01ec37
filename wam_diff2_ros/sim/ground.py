"""The renderer's ground shader: grass, gravel shoulders, asphalt and lane lines, textured, box-filtered over each
pixel's footprint and hazed, computed in float32 over cache-sized chunks of the ground pixels (see
:class:`GroundShader`)."""

from __future__ import annotations

import math

import numpy as np

from wam_diff2_ros.sim.road import (
    ASPHALT_D,
    CAMERA_X_M,
    CENTRE_D,
    DASH_LENGTH,
    DASH_PERIOD,
    LEFT_EDGE_D,
    LINE_WIDTH,
    RIGHT_EDGE_D,
    SHOULDER_D,
    Road,
)

HAZE_COLOUR = np.array([0.78, 0.83, 0.88], np.float32)
_GRASS = np.array([0.30, 0.43, 0.19], np.float32)
_GRAVEL = np.array([0.50, 0.47, 0.42], np.float32)
_ASPHALT = np.array([0.30, 0.30, 0.32], np.float32)
_PAINT = np.array([0.90, 0.90, 0.88], np.float32)
_GROUND_PALETTE = np.stack(
    [_GRASS, _GRAVEL, _ASPHALT, 0.9 * _GRASS, 0.3 * _GRAVEL, 0.18 * _ASPHALT, _PAINT, HAZE_COLOUR]
).astype(np.float32)
HAZE_M = 420.0
FAR_M = 170.0
# Ground pixels per task: the temporaries stay in the CPU cache, and each numpy pass is long enough that the GIL
# handoffs between the renderer's threads cost little (on the 2-core development VM, 49152 beat 16384 to 32768
# and 65536 to 141000 with 2 threads, and matched 32768 with 1).
CHUNK = 49152


def _cover(lo: float, hi: float, near: np.ndarray, far: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Fraction of each pixel footprint [near, far] (of length ``width``) inside [lo, hi] (box-filtered edge)."""
    out = np.minimum(np.float32(hi), far)
    out -= np.maximum(np.float32(lo), near)
    out /= width
    np.clip(out, 0.0, 1.0, out=out)
    return out


def _bilinear(flat: np.ndarray, size: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """:func:`~wam_diff2_ros.sim.scenario.sample_texture` of the raveled padded texture ``flat`` (``size`` + 1
    square), in place (``u``, ``v`` are overwritten) and without index copies: the same arithmetic."""
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


class GroundShader:
    """Per-pixel ground colours of one camera. Without camera roll the ground is the image's last rows, so the
    shader runs on the flat pixel range from the first ground pixel ``g0`` to the end (a few sky pixels of its first
    row are shaded and then not written), in :attr:`chunks`. :meth:`shade` writes one chunk's pixels and reads
    nothing but its arguments and this object's constant arrays (every temporary is its own), so chunks may be
    shaded on several threads at once."""

    def __init__(self, ground: np.ndarray, t: np.ndarray, dx: np.ndarray, dy: np.ndarray, dz: np.ndarray, fx: float,
                 texture: np.ndarray) -> None:  # fmt: skip
        """``ground``: which (raveled) pixels see the ground, at ray length ``t`` along the unit ray
        ``(dx, dy, dz)`` from the camera (base_link axes); ``fx``: focal length (pixels); ``texture``: the padded
        square grain texture."""
        pixels = len(ground)
        self.g0 = g0 = int(np.argmax(ground)) if ground.any() else pixels
        self.is_ground = ground[g0:]
        tg = np.where(self.is_ground, t[g0:], 10.0)
        f32 = np.float32
        self.gx = (CAMERA_X_M + tg * dx[g0:]).astype(f32)
        self.gy = (tg * dy[g0:]).astype(f32)
        self.fp_lat = np.maximum(tg / fx, 1e-3).astype(f32)
        self.fp_long = np.maximum(tg / (fx * np.maximum(-dz[g0:], 1e-3)), 1e-3).astype(f32)
        self.half_lat, self.half_long = self.fp_lat * f32(0.5), self.fp_long * f32(0.5)
        self.haze = (1 - np.exp(-tg / HAZE_M)).astype(f32)
        self.clear = 1.0 - self.haze
        self.haze_colour = [self.haze * _GROUND_PALETTE[7, c] for c in range(3)]
        self.near = tg < FAR_M * 1.6
        close = self.fp_long < 0.25  # fine grain only where a pixel covers less than its texel
        self.fine_amp = np.where(close, 1.0 - self.fp_long / 0.25, 0.0).astype(f32)
        self.dashes_blur = self.fp_long > DASH_PERIOD
        self.texture = (texture.ravel(), texture.shape[0] - 1)
        self.chunks = [
            (a, min(a + CHUNK, pixels - g0), close[a : a + CHUNK].any(), self.is_ground[a : a + CHUNK].all())
            for a in range(0, pixels - g0, CHUNK)
        ]

    def shade(self, planes: np.ndarray, chunk: tuple[int, int, bool, bool], road: Road,
              ego: tuple[float, float, float, float]) -> None:  # fmt: skip
        """Write the ground pixels of ``chunk`` (one of :attr:`chunks`) into ``planes`` (3, H * W) float32, the
        rear axle at ``ego`` = (x, y, yaw, arc length along ``road``)."""
        a, b, any_close, all_ground = chunk
        ex, ey, eyaw, ego_s = ego
        c, s = np.float32(math.cos(eyaw)), np.float32(math.sin(eyaw))
        flat, size = self.texture
        palette = _GROUND_PALETTE
        gx, gy = self.gx[a:b], self.gy[a:b]
        wx = np.float32(ex) + c * gx - s * gy
        wy = np.float32(ey) + s * gx + c * gy
        s_road, d_road = road.project(wx, wy, ego_s, FAR_M * 1.6)
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
