"""Ego acceleration derived from odometry (:func:`derive_acceleration`) and its configuration.

A least-squares line through the odometry velocities ``vx(t)``, ``vy(t)`` (child frame, i.e. base_link) of the
samples in the causal window ``[t - window_s, t]`` ending at the odometry sample used for the plan; its slope is
``dv/dt``. With ``include_centripetal`` the rotation of the body frame is added, ``a = dv/dt + ω × v``
(``ax -= mean(ω·vy)``, ``ay += mean(ω·vx)`` over the window), which is what an IMU in base_link measures and what
NAVSIM's ego acceleration holds (lateral acceleration in a turn). The estimate refers to the middle of the window
(a lag of ``window_s / 2``); it needs ``min_samples`` samples spanning at least ``min_span_s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .samples import InputError, OdometrySample
from .units import NS_PER_S

ACCELERATION_SOURCES = ("auto", "topic", "odometry")


@dataclass(frozen=True)
class AccelerationFilterConfig:
    """Parameters of :func:`derive_acceleration` (see the module docstring)."""

    window_s: float = 0.4
    min_samples: int = 3
    min_span_s: float = 0.1
    include_centripetal: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"acceleration.window_s must be > 0, got {self.window_s}")
        if self.min_samples < 2:
            raise ValueError(f"acceleration.min_samples must be >= 2, got {self.min_samples}")
        if not (math.isfinite(self.min_span_s) and 0 < self.min_span_s <= self.window_s):
            raise ValueError(f"acceleration.min_span_s must be in (0, window_s={self.window_s}], got {self.min_span_s}")


def derive_acceleration(
    samples: Sequence[OdometrySample], at_ns: int, config: AccelerationFilterConfig
) -> tuple[float, float]:
    """Acceleration (ax, ay) in base_link from odometry ``samples`` (sorted by stamp) up to ``at_ns``.

    Least-squares slope of the velocities over ``[at_ns - window_s, at_ns]`` plus, with
    ``include_centripetal``, the window mean of ``ω × v``. Raises :class:`InputError` when the window
    holds fewer than ``min_samples`` samples or they span less than ``min_span_s``.
    """
    start_ns = at_ns - round(config.window_s * NS_PER_S)
    window = [s for s in samples if start_ns <= s.stamp_ns <= at_ns]
    span_s = (window[-1].stamp_ns - window[0].stamp_ns) / NS_PER_S if window else 0.0
    if len(window) < config.min_samples or span_s < config.min_span_s:
        raise InputError(
            f"not enough odometry history to derive acceleration ({len(window)} sample(s) over "
            f"{span_s * 1000:.0f} ms in the last {config.window_s * 1000:.0f} ms; need {config.min_samples} "
            f"over {config.min_span_s * 1000:.0f} ms)"
        )
    t = np.array([(s.stamp_ns - at_ns) / NS_PER_S for s in window])
    vx = np.array([s.vx for s in window])
    vy = np.array([s.vy for s in window])
    t_centred = t - t.mean()
    denominator = float(np.dot(t_centred, t_centred))
    ax = float(np.dot(t_centred, vx - vx.mean()) / denominator)
    ay = float(np.dot(t_centred, vy - vy.mean()) / denominator)
    if config.include_centripetal:
        omega = np.array([s.yaw_rate for s in window])
        ax -= float(np.mean(omega * vy))
        ay += float(np.mean(omega * vx))
    return ax, ay
