"""Camera geometry: pinhole intrinsics (from CameraInfo or the documented fallback), the decoded frame an
observation carries, and a camera's mounting (body pose in base_link → rotation, optical frame)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .samples import InputError, _finite


@dataclass(frozen=True)
class CameraIntrinsics:
    """Pinhole intrinsics of an image of ``width`` × ``height`` pixels (``source``: where they came from)."""

    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int
    source: str = "camera_info"

    def __post_init__(self) -> None:
        _finite("camera intrinsics", self.fx, self.fy, self.cx, self.cy)
        if self.fx <= 0 or self.fy <= 0:
            raise InputError(f"camera intrinsics need positive focal lengths, got fx={self.fx}, fy={self.fy}")
        if self.width <= 0 or self.height <= 0:
            raise InputError(f"camera intrinsics need a positive image size, got {self.width}x{self.height}")

    @classmethod
    def pinhole_fallback(cls, width: int, height: int, hfov_deg: float) -> CameraIntrinsics:
        """The documented fallback without CameraInfo: square pixels, principal point at the image centre,
        ``fx = fy = width / (2 tan(hfov / 2))``."""
        if not 0.0 < hfov_deg < 180.0:
            raise InputError(f"horizontal field of view must be in (0, 180) degrees, got {hfov_deg}")
        focal = width / (2.0 * math.tan(math.radians(hfov_deg) / 2.0))
        return cls(focal, focal, width / 2.0, height / 2.0, width, height, source="fallback")

    def scaled_to(self, width: int, height: int) -> CameraIntrinsics:
        """These intrinsics for the same camera delivering ``width`` × ``height`` images (binning/resize)."""
        if (width, height) == (self.width, self.height):
            return self
        sx, sy = width / self.width, height / self.height
        return CameraIntrinsics(
            self.fx * sx, self.fy * sy, self.cx * sx, self.cy * sy, width, height, source=self.source
        )

    def back_project(self, u: float, v: float, depth: float) -> tuple[float, float, float]:
        """The point of pixel (u, v) at ``depth`` metres along the optical axis, in the optical frame
        (z forward, x right, y down)."""
        return ((u - self.cx) / self.fx * depth, (v - self.cy) / self.fy * depth, depth)

    def project(self, x: float, y: float, z: float) -> tuple[float, float] | None:
        """Pixel of an optical-frame point, None when it is not in front of the camera."""
        if z <= 1e-6:
            return None
        return (self.fx * x / z + self.cx, self.fy * y / z + self.cy)


@dataclass(frozen=True)
class CameraFrame:
    """A decoded camera image used in an observation."""

    camera: str
    index: int
    stamp_ns: int
    receive_ns: int
    frame_id: str
    image: np.ndarray = field(repr=False)
    intrinsics: CameraIntrinsics

    @property
    def width(self) -> int:
        """Image width in pixels."""
        return int(self.image.shape[1])

    @property
    def height(self) -> int:
        """Image height in pixels."""
        return int(self.image.shape[0])


#: The optical frame's axes (z forward, x right, y down) as columns in the camera body frame (x forward, y left,
#: z up, REP 103).
OPTICAL_IN_BODY = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def rotation_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """R = Rz(yaw)·Ry(pitch)·Rx(roll) (REP 103 fixed-axis roll, pitch, yaw)."""
    cr, sr, cp, sp, cy, sy = (
        math.cos(roll),
        math.sin(roll),
        math.cos(pitch),
        math.sin(pitch),
        math.cos(yaw),
        math.sin(yaw),
    )
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    return rz @ ry @ rx


def quaternion_from_matrix(r: np.ndarray) -> tuple[float, float, float, float]:
    """(x, y, z, w) of a rotation matrix."""
    w = math.sqrt(max(0.0, 1.0 + r[0, 0] + r[1, 1] + r[2, 2])) / 2.0
    x = math.copysign(math.sqrt(max(0.0, 1.0 + r[0, 0] - r[1, 1] - r[2, 2])) / 2.0, r[2, 1] - r[1, 2])
    y = math.copysign(math.sqrt(max(0.0, 1.0 - r[0, 0] + r[1, 1] - r[2, 2])) / 2.0, r[0, 2] - r[2, 0])
    z = math.copysign(math.sqrt(max(0.0, 1.0 - r[0, 0] - r[1, 1] + r[2, 2])) / 2.0, r[1, 0] - r[0, 1])
    return x, y, z, w


def optical_rotation(roll: float, pitch: float, yaw: float) -> tuple[float, float, float, float]:
    """The camera's optical frame in base_link for a body pose with REP 103 roll, pitch, yaw, as a quaternion
    (x, y, z, w)."""
    return quaternion_from_matrix(rotation_matrix(roll, pitch, yaw) @ OPTICAL_IN_BODY)
