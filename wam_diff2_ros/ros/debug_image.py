"""The ``~/debug/image`` picture: a camera image with detection boxes and the planned path (PIL only).

The path is always drawn in a bird's-eye inset (bottom right: ego at the bottom centre, x forward up,
y left to the left, ``inset_range_m`` metres tall, grid every 10 m). With the front camera's pose in
base_link (``debug.camera_pose``: camera body frame x forward, y left, z up; roll/pitch/yaw in
REP 103 order, R = Rz(yaw)·Ry(pitch)·Rx(roll)) it is also projected into the image on the ground
plane z = 0 of base_link, using the camera's intrinsics. An invalid plan is written as a red line of
text instead. ROS-free: returns a new RGB array.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from wam_diff2_ros.core.camera import CameraIntrinsics, rotation_matrix
from wam_diff2_ros.core.parsing import Detection

from .outputs import confidence_color, label_color

CameraPose = tuple[float, float, float, float, float, float]

_PATH_COLOR = (30, 230, 80)
_WAYPOINT_COLOR = (255, 215, 25)
_ERROR_COLOR = (255, 60, 60)


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def base_to_optical(points: np.ndarray, camera_pose: CameraPose) -> np.ndarray:
    """Nx3 base_link points → the camera's optical frame (z forward, x right, y down)."""
    x, y, z, roll, pitch, yaw = camera_pose
    rotation = rotation_matrix(roll, pitch, yaw)
    body = (np.asarray(points, dtype=float) - np.array([x, y, z])) @ rotation  # R^T (p - t), row-wise
    return np.stack([-body[:, 1], -body[:, 2], body[:, 0]], axis=1)


def project_path(
    waypoints_xy: Sequence[tuple[float, float]],
    camera_pose: CameraPose,
    intrinsics: CameraIntrinsics,
    min_depth_m: float = 0.5,
) -> list[list[tuple[float, float]]]:
    """Pixel polylines of the ground path origin → waypoints (densified, cut where it passes behind the
    camera); one list per visible piece."""
    points = [(0.0, 0.0), *waypoints_xy]
    dense: list[tuple[float, float]] = []
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        steps = max(1, int(math.hypot(x1 - x0, y1 - y0) / 0.5))
        dense.extend((x0 + (x1 - x0) * k / steps, y0 + (y1 - y0) * k / steps) for k in range(steps))
    dense.append(points[-1])
    ground = np.array([[x, y, 0.0] for x, y in dense])
    optical = base_to_optical(ground, camera_pose)
    pieces: list[list[tuple[float, float]]] = [[]]
    for px, py, pz in optical:
        pixel = intrinsics.project(px, py, pz) if pz >= min_depth_m else None
        if pixel is None:
            if pieces[-1]:
                pieces.append([])
            continue
        pieces[-1].append(pixel)
    return [p for p in pieces if len(p) >= 2]


def _waypoint_colors(count: int, confidence: Sequence[float] | None) -> list[tuple[int, int, int]]:
    """Per waypoint its dot colour: by confidence when there is one per waypoint, else the plain colour."""
    if confidence is None or len(confidence) != count:
        return [_WAYPOINT_COLOR] * count
    return [tuple(int(c * 255) for c in confidence_color(value)) for value in confidence]  # type: ignore[misc]


def _draw_inset(
    draw: ImageDraw.ImageDraw,
    width: int,
    height: int,
    waypoints_xy: Sequence[tuple[float, float]],
    range_m: float,
    confidence: Sequence[float] | None = None,
) -> None:
    size = max(60, min(width, height) // 3)
    left, top = width - size - 8, height - size - 8
    draw.rectangle([left, top, left + size, top + size], fill=(20, 20, 20), outline=(200, 200, 200))
    scale = size * 0.9 / range_m
    origin_u, origin_v = left + size / 2, top + size * 0.95

    def to_pixel(x: float, y: float) -> tuple[float, float]:
        return (origin_u - y * scale, origin_v - x * scale)

    for metres in range(10, int(range_m) + 1, 10):
        v = origin_v - metres * scale
        if v > top:
            draw.line([(left + 1, v), (left + size - 1, v)], fill=(60, 60, 60))
    draw.polygon(
        [(origin_u, origin_v - 6), (origin_u - 4, origin_v + 3), (origin_u + 4, origin_v + 3)], fill=(220, 220, 220)
    )
    if waypoints_xy:
        pixels = [to_pixel(0.0, 0.0)] + [to_pixel(x, y) for x, y in waypoints_xy]
        pixels = [(min(max(u, left), left + size), min(max(v, top), top + size)) for u, v in pixels]
        draw.line(pixels, fill=_PATH_COLOR, width=2)
        for (u, v), color in zip(pixels[1:], _waypoint_colors(len(waypoints_xy), confidence), strict=True):
            draw.ellipse([u - 3, v - 3, u + 3, v + 3], fill=color)


def draw_debug_image(
    rgb: np.ndarray,
    detections: Sequence[Detection] = (),
    waypoints_xy: Sequence[tuple[float, float]] | None = None,
    plan_problem: str = "",
    camera_pose: CameraPose | None = None,
    intrinsics: CameraIntrinsics | None = None,
    inset_range_m: float = 40.0,
    caption: str = "",
    waypoint_confidence: Sequence[float] | None = None,
) -> np.ndarray:
    """A copy of ``rgb`` with boxes + labels, the path (inset, and projected when ``camera_pose`` and
    ``intrinsics`` are given) with its waypoints coloured by ``waypoint_confidence`` (red 0 → green 1),
    ``plan_problem`` in red and a caption line."""
    picture = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    draw = ImageDraw.Draw(picture)
    width, height = picture.size
    font = _font(max(10, height // 40))
    line_width = max(1, height // 300)
    for detection in detections:
        color = tuple(int(c * 255) for c in label_color(detection.label))
        draw.rectangle(
            [detection.x_min, detection.y_min, detection.x_max, detection.y_max], outline=color, width=line_width + 1
        )
        text = detection.label + (f" {detection.score:.2f}" if detection.score is not None else "")
        text_top = (
            max(0.0, detection.y_min - font.size - 4) if hasattr(font, "size") else max(0.0, detection.y_min - 14)
        )
        draw.text((detection.x_min + 2, text_top), text, fill=color, font=font)
    if waypoints_xy:
        if camera_pose is not None and intrinsics is not None:
            scaled = intrinsics.scaled_to(width, height)
            for piece in project_path(waypoints_xy, camera_pose, scaled):
                draw.line(piece, fill=_PATH_COLOR, width=line_width + 2)
            radius = line_width + 3
            colors = _waypoint_colors(len(waypoints_xy), waypoint_confidence)
            for (x, y), color in zip(waypoints_xy, colors, strict=True):
                optical = base_to_optical(np.array([[x, y, 0.0]]), camera_pose)[0]
                pixel = scaled.project(*optical) if optical[2] >= 0.5 else None
                if pixel is not None:
                    u, v = pixel
                    draw.ellipse([u - radius, v - radius, u + radius, v + radius], fill=color)
        _draw_inset(draw, width, height, waypoints_xy, inset_range_m, waypoint_confidence)
    elif plan_problem:
        _draw_inset(draw, width, height, (), inset_range_m)
    y = 4
    if caption:
        draw.text((6, y), caption, fill=(255, 255, 255), font=font)
        y += (font.size if hasattr(font, "size") else 12) + 4
    if plan_problem:
        draw.text((6, y), ("no plan: " + plan_problem)[:120], fill=_ERROR_COLOR, font=font)
    return np.asarray(picture)
