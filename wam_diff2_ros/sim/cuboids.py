"""The renderer's cuboid actors in world coordinates: shadow, faces and their quads (the face and its decals)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wam_diff2_ros.sim.scenario import Actor

SUN = np.array([0.45, 0.35, 0.82]) / np.linalg.norm([0.45, 0.35, 0.82])
# Unit cube faces: (axis, sign, tangent u axis, tangent v axis).
FACES = ((0, 1, 1, 2), (0, -1, 1, 2), (1, 1, 0, 2), (1, -1, 0, 2), (2, 1, 0, 1), (2, -1, 0, 1))


@dataclass(frozen=True)
class ActorGeometry:
    """An actor's shadow corners (4, 3) and its faces (normal, centre, shade: F rows) and their quads (the face and
    its decals: face index, corners (Q, 4, 3), colour (Q, 3)), in world coordinates."""

    shadow: np.ndarray
    normals: np.ndarray
    centres: np.ndarray
    shades: np.ndarray
    quad_face: np.ndarray
    quad_corners: np.ndarray
    quad_rgb: np.ndarray


def actor_geometry(pose: tuple[float, float, float], actor: Actor) -> ActorGeometry:
    """An actor's shadow corners and its faces' quads (the face, then its decals) in world coordinates, standing at
    ``pose`` (x, y, yaw)."""
    ax, ay, ayaw = pose
    rot = np.array([[math.cos(ayaw), -math.sin(ayaw), 0], [math.sin(ayaw), math.cos(ayaw), 0], [0, 0, 1]])
    origin = np.array([ax, ay, 0.0])
    xs = [c[0] - s[0] / 2 for c, s, _ in actor.parts] + [c[0] + s[0] / 2 for c, s, _ in actor.parts]
    ys = [c[1] - s[1] / 2 for c, s, _ in actor.parts] + [c[1] + s[1] / 2 for c, s, _ in actor.parts]
    x0, x1, y0, y1 = min(xs) - 0.15, max(xs) + 0.15, min(ys) - 0.15, max(ys) + 0.15
    shadow = np.array([[x0, y0, 0.01], [x1, y0, 0.01], [x1, y1, 0.01], [x0, y1, 0.01]]) @ rot.T + origin
    shadow[:, :2] -= SUN[:2] * 0.35
    normals, centres, shades, quad_face, quad_corners, quad_rgb = [], [], [], [], [], []
    for part, (centre_, size, colour) in enumerate(actor.parts):
        centre, half = np.array(centre_), np.array(size) / 2
        for face_id, (axis, sign, ua, va) in enumerate(FACES):
            normal_local = np.zeros(3)
            normal_local[axis] = sign
            normal = rot @ normal_local
            normals.append(normal)
            centres.append(rot @ (centre + normal_local * half) + origin)
            shades.append(0.5 + 0.5 * max(0.0, float(normal @ SUN)))
            quads = [((-1.0, 1.0, -1.0, 1.0), colour)]
            quads += [(r, c) for p, face, r, c in actor.decals if p == part and face == face_id]
            for k, (rect, rgb) in enumerate(quads):
                quad_face.append(len(normals) - 1)
                corners = face_quad(centre, half, normal_local, ua, va, rect, lift=0.005 * k)
                quad_corners.append(corners @ rot.T + origin)
                quad_rgb.append([float(v) for v in rgb])
    return ActorGeometry(
        shadow,
        np.array(normals).reshape(-1, 3),
        np.array(centres).reshape(-1, 3),
        np.array(shades),
        np.array(quad_face, np.int64),
        np.array(quad_corners).reshape(-1, 4, 3),
        np.array(quad_rgb).reshape(-1, 3),
    )


def face_quad(
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
