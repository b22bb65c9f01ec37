"""The simulated ego: a kinematic bicycle about the rear axle with actuator limits (:class:`Vehicle`).

State: rear-axle position ``x, y`` (m), heading ``yaw`` (rad), speed ``v`` (m/s, never negative: the car
does not reverse), longitudinal acceleration ``a`` (m/s²) and front-wheel steering angle ``delta`` (rad).
Per step of ``dt`` the commanded steering angle is reached at most at :attr:`VehicleLimits.steer_rate`, the
commanded acceleration at most at :attr:`VehicleLimits.jerk` and within ``[brake, accel]``; then
``x' = v cos yaw``, ``y' = v sin yaw``, ``yaw' = v tan(delta) / L`` (exact arc over the step).

Body dimensions and wheelbase are nuPlan's Chrysler Pacifica (``get_pacifica_parameters`` in
nuplan-devkit's ``vehicle_parameters.py``), the ego that NAVSIM scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class VehicleLimits:
    """The ego's geometry and actuator limits (stated once; docs/closed_loop.md quotes them)."""

    wheelbase: float = 3.089  # m (Pacifica)
    front_length: float = 4.049  # m, rear axle → front bumper
    rear_length: float = 1.127  # m, rear axle → rear bumper
    width: float = 2.297  # m
    max_steer: float = 0.6  # rad at the front wheel (≈ 34°: 5.3 m turning radius at the rear axle)
    steer_rate: float = 0.6  # rad/s
    accel: float = 3.0  # m/s², most forward acceleration
    brake: float = -6.0  # m/s², hardest braking
    jerk: float = 6.0  # m/s³, how fast the acceleration may change

    @property
    def centre_offset(self) -> float:
        """Rear axle → the body's centre along x (m)."""
        return (self.front_length - self.rear_length) / 2

    @property
    def length(self) -> float:
        return self.front_length + self.rear_length


@dataclass(frozen=True)
class VehicleState:
    x: float
    y: float
    yaw: float
    v: float
    a: float = 0.0
    delta: float = 0.0


class Vehicle:
    """Steps a :class:`VehicleState` under steering and acceleration commands within :class:`VehicleLimits`."""

    def __init__(self, state: VehicleState, limits: VehicleLimits | None = None) -> None:
        self.limits = limits or VehicleLimits()
        self.state = state

    def yaw_rate(self) -> float:
        s = self.state
        return s.v * math.tan(s.delta) / self.limits.wheelbase

    def step(self, steer_cmd: float, accel_cmd: float, dt: float) -> VehicleState:
        """Advance by ``dt`` seconds toward the commands, within the limits; returns the new state."""
        lim, s = self.limits, self.state
        steer_cmd = float(np.clip(steer_cmd, -lim.max_steer, lim.max_steer))
        delta = s.delta + float(np.clip(steer_cmd - s.delta, -lim.steer_rate * dt, lim.steer_rate * dt))
        accel_cmd = float(np.clip(accel_cmd, lim.brake, lim.accel))
        a = s.a + float(np.clip(accel_cmd - s.a, -lim.jerk * dt, lim.jerk * dt))
        v = s.v + a * dt
        if v > 0.0:
            distance = (s.v + v) / 2 * dt
        else:  # stops within the step (no reversing); standing still, the ground holds the car
            distance = s.v * s.v / (-2.0 * a) if a < 0 else 0.0
            v, a = 0.0, max(a, 0.0)
        kappa = math.tan(delta) / lim.wheelbase
        turn = kappa * distance
        if abs(turn) < 1e-9:
            x = s.x + distance * math.cos(s.yaw + turn / 2)
            y = s.y + distance * math.sin(s.yaw + turn / 2)
        else:
            x = s.x + (math.sin(s.yaw + turn) - math.sin(s.yaw)) / kappa
            y = s.y - (math.cos(s.yaw + turn) - math.cos(s.yaw)) / kappa
        self.state = replace(s, x=x, y=y, yaw=_wrap(s.yaw + turn), v=v, a=a, delta=delta)
        return self.state

    def footprint(self, state: VehicleState | None = None) -> np.ndarray:
        """The body's corners (4, 2) in the world: front-left, front-right, rear-right, rear-left."""
        return footprint(state or self.state, self.limits)


def footprint(state: VehicleState, limits: VehicleLimits) -> np.ndarray:
    """Corners (4, 2) of the ego's body at ``state`` (front-left, front-right, rear-right, rear-left)."""
    c, s = math.cos(state.yaw), math.sin(state.yaw)
    half = limits.width / 2
    local = np.array(
        [
            [limits.front_length, half],
            [limits.front_length, -half],
            [-limits.rear_length, -half],
            [-limits.rear_length, half],
        ]
    )
    return np.stack([state.x + c * local[:, 0] - s * local[:, 1], state.y + s * local[:, 0] + c * local[:, 1]], axis=1)


def _wrap(angle: float) -> float:
    return math.atan2(math.sin(angle), math.cos(angle))
