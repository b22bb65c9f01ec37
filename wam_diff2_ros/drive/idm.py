"""Car following along the route with the Intelligent Driver Model (:func:`idm_rollout`), shared by the expert
planner (:mod:`wam_diff2_ros.drive.reference`) and the scorer's ego-progress reference
(:mod:`wam_diff2_ros.drive.score`).

IDM after M. Treiber, A. Hennecke, D. Helbing, "Congested traffic states in empirical observations and microscopic
simulations", Phys. Rev. E 62, 2000: ``a = a_max [1 - (v / v0)^4 - (s* / gap)^2]`` with the desired gap
``s* = s_min + v T + v (v - v_lead) / (2 sqrt(a_max b))``. The parameters are PDM-Closed's (D. Dauner, M. Hallgarten,
A. Geiger, K. Chitta, "Parting with Misconceptions about Learning-based Vehicle Motion Planning", CoRL 2023):
``a_max`` 1.5 m/s², ``b`` 3 m/s², ``T`` 1.5 s, ``s_min`` 1 m; ``v0`` is the route's speed where the car is. The
leaders are the world's objects whose box overlaps the ego's corridor along the lane centre, at their true pose at
each step (the simulator's ground truth; PDM-Closed predicts them, here they are known).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wam_diff2_ros.drive.vehicle import VehicleLimits
from wam_diff2_ros.drive.world import World

ACCEL_MAX = 1.5  # m/s²
DECEL_COMFORT = 3.0  # m/s² (IDM's b)
DECEL_LIMIT = 4.0  # m/s²: never brake harder than this (NAVSIM's comfort bound is 4.05)
HEADWAY_S = 1.5
MIN_GAP_M = 1.0
EXPONENT = 4.0
STEP_S = 0.1
CORRIDOR_MARGIN_M = 0.3  # an object closer than this to the ego's side, laterally, is in the corridor


@dataclass(frozen=True)
class Rollout:
    """Arc length ``s`` (m, the ego's rear axle) and speed ``v`` (m/s) at ``t`` (s after the start), every STEP_S."""

    t: np.ndarray
    s: np.ndarray
    v: np.ndarray

    @property
    def progress_m(self) -> float:
        return float(self.s[-1] - self.s[0])


def _leaders(world: World, limits: VehicleLimits, s0: float, t0: float, horizon_s: float, reach_m: float) -> list:
    """The obstacles that can be ahead in the ego's corridor within ``reach_m`` during the rollout."""
    out = []
    corridor = limits.width / 2 + CORRIDOR_MARGIN_M
    ex, ey, _ = (float(v[0]) for v in world.road.pose(s0))
    for ob in world.obstacles:
        for t in (t0, t0 + horizon_s):
            x, y, _ = ob.actor.pose(t)
            if math.hypot(x - ex, y - ey) > reach_m + ob.half_length + 10.0:
                continue  # too far away to be ahead within reach (cheap before the projection)
            s, d = world.frenet(x, y, s0)
            if -ob.half_length < s[0] - s0 < reach_m and abs(d[0]) < corridor + ob.half_width:
                out.append(ob)
                break
    return out


def idm_rollout(
    world: World,
    s0: float,
    v0: float,
    t0: float,
    horizon_s: float,
    limits: VehicleLimits | None = None,
) -> Rollout:
    """The ego's IDM motion along the lane centre from arc length ``s0`` (rear axle) at speed ``v0``, episode time
    ``t0``, for ``horizon_s`` (see the module docstring)."""
    limits = limits or VehicleLimits()
    steps = max(1, round(horizon_s / STEP_S))
    reach = v0 * horizon_s + 0.5 * ACCEL_MAX * horizon_s**2 + 60.0
    leaders = _leaders(world, limits, s0, t0, horizon_s, reach)
    front = limits.front_length  # rear axle → front bumper
    ts, ss, vs = [0.0], [s0], [v0]
    s, v = s0, v0
    for k in range(steps):
        t = t0 + k * STEP_S
        desired = max(float(world.route_speed(np.array([s]))[0]), 0.1)
        accel = ACCEL_MAX * (1.0 - (v / desired) ** EXPONENT)
        gap, lead_v = _nearest_leader(world, leaders, s, t, front)
        if gap is not None:
            wanted = MIN_GAP_M + v * HEADWAY_S + v * (v - lead_v) / (2.0 * math.sqrt(ACCEL_MAX * DECEL_COMFORT))
            accel -= ACCEL_MAX * (max(wanted, 0.0) / max(gap, 0.1)) ** 2
        accel = min(max(accel, -DECEL_LIMIT), ACCEL_MAX)
        v_next = max(0.0, v + accel * STEP_S)
        s += (v + v_next) / 2 * STEP_S
        v = v_next
        ts.append((k + 1) * STEP_S)
        ss.append(s)
        vs.append(v)
    return Rollout(np.array(ts), np.array(ss), np.array(vs))


def _nearest_leader(world: World, leaders: list, s: float, t: float, front: float) -> tuple[float | None, float]:
    """The bumper-to-bumper gap (m) to the nearest leader ahead of the ego's front at ``t``, and its speed."""
    best: tuple[float | None, float] = (None, 0.0)
    for ob in leaders:
        x, y, _ = ob.actor.pose(t)
        x1, y1, _ = ob.actor.pose(t + STEP_S)
        os_, _ = world.frenet(x, y, s)
        gap = float(os_[0]) - ob.half_length - (s + front)
        if float(os_[0]) + ob.half_length <= s:
            continue  # behind the ego's rear axle
        if best[0] is None or gap < best[0]:
            best = (gap, math.hypot(x1 - x, y1 - y) / STEP_S)
    return best
