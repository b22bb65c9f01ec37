"""The episode's score from exact geometry: NAVSIM's PDM score terms (:func:`score_episode`).

Definitions, weights and bounds follow NAVSIM (autonomousvision/navsim,
``navsim/planning/simulation/planner/pdm_planner/scoring/pdm_scorer.py`` and ``pdm_comfort_metrics.py``):

- the episode is cut into NAVSIM's proposal horizon, windows of ``WINDOW_S`` = 4 s sampled at 10 Hz (41 states),
  and each window is scored as NAVSIM scores a 4 s trajectory; the episode's PDMS is the mean over its windows
  (NAVSIM averages over scenes);
- ``PDMS = NC · DAC · (5 EP + 5 TTC + 2 C) / 12`` (``PDMScorerConfig``: progress 5, ttc 5, comfortable 2, driving
  direction 0);
- NC, no at-fault collision: 0 when the ego's box meets a vehicle's box at fault, 0.5 for a static object;
  at fault (nuPlan's collision types): the ego moves (≥ 0.05 m/s) and the other is stopped, or the ego's front edge
  hits it, or a lateral contact while the ego straddles lanes or leaves the drivable area; other contacts are
  remembered and ignored afterwards, as NAVSIM does;
- DAC, drivable-area compliance: 0 when a corner of the ego's body leaves the asphalt (both lanes);
- EP, ego progress, as NAVSIM computes it (autonomousvision/navsim, ``pdm_scorer.py`` ``_aggregate_scores``; the
  reference trajectory from PDM-Closed in ``metric_caching``): the body centre's advance along the route's lane
  centre over the window (times NC · DAC), divided by the largest of that and the progress of the reference
  planner from the ego's state at the window's start — IDM towards the route's speed behind the vehicles ahead,
  with PDM-Closed's parameters (:func:`wam_diff2_ros.drive.idm.idm_rollout`); 1 when that largest progress is
  ≤ 5 m (NAVSIM's ``progress_distance_threshold``) and NC · DAC > 0, else 0. A car starting from standstill is
  measured against IDM's start from standstill, and behind a slower lead against IDM's headway: tailgating earns
  nothing over following;
- TTC: 0 when the ego's box, moved 0, 0.3, 0.6, 0.9 s ahead at its speed and heading, meets an object ahead (within
  30° of the heading, nuPlan's ``is_agent_ahead``) or, straddling lanes or off the road, one not behind (150°);
- C, comfort: longitudinal acceleration in (-4.05, 2.40) m/s², lateral |a| < 4.89 m/s², jerk magnitude < 8.37 and
  longitudinal jerk < 4.13 m/s³, yaw rate < 0.95 rad/s, yaw acceleration < 1.93 rad/s², each from a least-squares
  polynomial over the window (a Savitzky–Golay filter as long as the window, as NAVSIM calls it: order 2, order 3
  for the yaw acceleration).

Also reported: lane-centre deviation (the body centre's lateral offset from the ego lane centre) and the events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wam_diff2_ros.drive.idm import idm_rollout
from wam_diff2_ros.drive.vehicle import VehicleLimits, VehicleState, footprint
from wam_diff2_ros.drive.world import World
from wam_diff2_ros.sim.road import ASPHALT_D, CENTRE_D, LANE_WIDTH

WINDOW_S = 4.0
TERMS = ("nc", "dac", "ep", "ttc", "c", "pdms")
SAMPLE_DT = 0.1
WEIGHTS = {"ep": 5.0, "ttc": 5.0, "c": 2.0}
COMFORT_BOUNDS = {
    "lon_accel": (-4.05, 2.40),
    "lat_accel": (-4.89, 4.89),
    "jerk": (-8.37, 8.37),
    "lon_jerk": (-4.13, 4.13),
    "yaw_rate": (-0.95, 0.95),
    "yaw_accel": (-1.93, 1.93),
}
STOPPED_SPEED = 0.05  # m/s (nuPlan's collision stopped-speed threshold)
TTC_STOPPED_SPEED = 5e-3  # m/s (NAVSIM stopped_speed_threshold)
TTC_OFFSETS_S = (0.0, 0.3, 0.6, 0.9)
PROGRESS_THRESHOLD_M = 5.0


@dataclass
class Trace:
    """The episode's ground truth at 10 Hz: time and ego state per sample (appended by the loop)."""

    t: list[float] = field(default_factory=list)
    states: list[VehicleState] = field(default_factory=list)
    yaw_rate: list[float] = field(default_factory=list)


def box_corners(x: float, y: float, yaw: float, half_length: float, half_width: float) -> np.ndarray:
    """Corners (4, 2) of a box centred at ``(x, y)`` with heading ``yaw``."""
    c, s = math.cos(yaw), math.sin(yaw)
    local = np.array(
        [[half_length, half_width], [half_length, -half_width], [-half_length, -half_width], [-half_length, half_width]]
    )
    return np.stack([x + c * local[:, 0] - s * local[:, 1], y + s * local[:, 0] + c * local[:, 1]], axis=1)


def polygons_intersect(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two convex polygons (N, 2) overlap or touch (separating axis test)."""
    for poly in (a, b):
        edges = np.roll(poly, -1, axis=0) - poly
        for ex, ey in edges:
            axis = np.array([-ey, ex])
            pa, pb = a @ axis, b @ axis
            if pa.max() < pb.min() or pb.max() < pa.min():
                return False
    return True


def _segment_hits(p: np.ndarray, q: np.ndarray, poly: np.ndarray) -> bool:
    """Whether the segment p→q meets the convex polygon (a thin polygon test)."""
    thin = np.array([p, q, q + 1e-6, p + 1e-6])
    return polygons_intersect(thin, poly)


def _relative_angle(ego: VehicleState, x: float, y: float) -> float:
    vx, vy = x - ego.x, y - ego.y
    norm = math.hypot(vx, vy)
    if norm < 1e-9:
        return 0.0
    return math.acos(max(-1.0, min(1.0, (math.cos(ego.yaw) * vx + math.sin(ego.yaw) * vy) / norm)))


def _poly_fit_values(t: np.ndarray, values: np.ndarray, order: int, deriv: int) -> np.ndarray:
    """A least-squares polynomial of ``order`` over the whole window, or its ``deriv``-th derivative, at ``t``."""
    order = min(order, len(t) - 1)
    coeffs = np.polyfit(t - t[0], values, order)
    return np.polyval(np.polyder(coeffs, deriv) if deriv else coeffs, t - t[0])


def comfort_terms(t: np.ndarray, states: list[VehicleState], yaw_rates: np.ndarray) -> dict[str, float]:
    """The largest magnitude of each comfort metric over one window (see the module docstring)."""
    lon = np.array([s.a for s in states])
    lat = np.array([s.v for s in states]) * yaw_rates
    heading = np.unwrap(np.array([s.yaw for s in states]))
    metrics = {
        "lon_accel": _poly_fit_values(t, lon, 2, 0),
        "lat_accel": _poly_fit_values(t, lat, 2, 0),
        "jerk": _poly_fit_values(t, np.hypot(lon, lat), 2, 1),
        "lon_jerk": _poly_fit_values(t, lon, 2, 1),
        "yaw_rate": _poly_fit_values(t, heading, 2, 1),
        "yaw_accel": _poly_fit_values(t, heading, 3, 2),
    }
    return {k: float(v[np.argmax(np.abs(v))]) for k, v in metrics.items()}


def comfortable(terms: dict[str, float]) -> dict[str, bool]:
    return {k: bool(lo < terms[k] < hi) for k, (lo, hi) in COMFORT_BOUNDS.items()}


def window_count(seconds: float) -> int:
    """How many windows ``seconds`` of driving make (4 s each; a last one of at least 1 s counts)."""
    full, rest = divmod(round(seconds / SAMPLE_DT), round(WINDOW_S / SAMPLE_DT))
    return full + (1 if rest * SAMPLE_DT >= 1.0 - 1e-9 else 0)


def episode_terms(windows: list[dict[str, Any]], planned_s: float | None = None) -> dict[str, Any]:
    """The episode's terms. NAVSIM scores each scene's 4 s on its own and averages every term over the scenes;
    here each window is a scene, so NC, DAC, EP, TTC and C are their means over the windows driven (a window that
    was not driven reports no event). An episode that ended early (off the road, a contact, stopped without a
    plan) before ``planned_s`` gets ``completion``, the share of its planned windows it drove, and its PDMS counts
    the windows not driven as 0 (the mean over the planned windows)."""
    planned = max(window_count(planned_s), len(windows)) if planned_s is not None else len(windows)
    terms = {k: float(np.mean([w[k] for w in windows])) for k in TERMS if k != "pdms"}
    pdms = float(np.sum([w["pdms"] for w in windows]) / planned)
    return {**terms, "pdms": pdms, "completion": len(windows) / planned, "windows_not_driven": planned - len(windows)}


def ego_progress(progress_m: float, reference_m: float) -> float:
    """NAVSIM's EP of one window: ``progress_m`` (already times NC · DAC) over the larger of it and the reference
    planner's progress; 1 when that is within :data:`PROGRESS_THRESHOLD_M` (see the module docstring)."""
    best = max(progress_m, reference_m)
    return 1.0 if best <= PROGRESS_THRESHOLD_M else float(progress_m / best)


def _lane_index(d: np.ndarray) -> np.ndarray:
    """0: the ego lane, 1: the oncoming lane, -1: neither."""
    return np.where(np.abs(d) <= LANE_WIDTH / 2, 0, np.where((d > CENTRE_D) & (d <= CENTRE_D + LANE_WIDTH), 1, -1))


class EpisodeScorer:
    """Per-sample geometry and per-window PDMS of one episode in ``world``."""

    def __init__(self, world: World, limits: VehicleLimits | None = None) -> None:
        self.world = world
        self.limits = limits or VehicleLimits()

    def _obstacle_box(self, index: int, t: float) -> tuple[np.ndarray, tuple[float, float, float], float]:
        ob = self.world.obstacles[index]
        x, y, yaw = ob.actor.pose(t)
        x1, y1, _ = ob.actor.pose(t + 0.05)
        speed = math.hypot(x1 - x, y1 - y) / 0.05
        return box_corners(x, y, yaw, ob.half_length, ob.half_width), (x, y, yaw), speed

    def _near(self, state: VehicleState, t: float, reach: float) -> list[int]:
        out = []
        for i, ob in enumerate(self.world.obstacles):
            x, y, _ = ob.actor.pose(t)
            if math.hypot(x - state.x, y - state.y) < reach:
                out.append(i)
        return out

    def sample_geometry(self, t: float, state: VehicleState, near_s: float) -> dict[str, Any]:
        """The ego at one instant: route arc length, lane deviation, corners on the road, lanes, contacts."""
        corners = footprint(state, self.limits)
        cx = state.x + math.cos(state.yaw) * self.limits.centre_offset
        cy = state.y + math.sin(state.yaw) * self.limits.centre_offset
        s, d = self.world.frenet(np.append(corners[:, 0], cx), np.append(corners[:, 1], cy), near_s)
        on_road = bool(np.all((d[:4] >= ASPHALT_D[0]) & (d[:4] <= ASPHALT_D[1])))
        lanes = set(_lane_index(d[:4]).tolist())
        contacts = []
        for i in self._near(state, t, 15.0):
            box, _, _ = self._obstacle_box(i, t)
            if polygons_intersect(corners, box):
                contacts.append(i)
        return {
            "s": float(s[4]),
            "d": float(d[4]),
            "on_road": on_road,
            "multi_lane": len(lanes) > 1 or -1 in lanes,
            "contacts": contacts,
            "corners": corners,
        }

    def score(self, trace: Trace, samples: list[dict[str, Any]], planned_s: float | None = None) -> dict[str, Any]:
        """Per-window terms and the episode's PDMS (the mean over windows; a last partial window of at least 1 s
        counts too). ``planned_s``: the scenario's duration, for an episode that ended early (off the road, a
        contact, stopped without a plan): its ``completion`` and a PDMS that counts the windows it did not drive
        as 0 (:func:`episode_terms`)."""
        count = min(len(trace.t), len(trace.states), len(trace.yaw_rate), len(samples))  # an interrupted step
        trace = Trace(trace.t[:count], trace.states[:count], trace.yaw_rate[:count])
        samples = samples[:count]
        per_window = round(WINDOW_S / SAMPLE_DT)
        windows = []
        start = 0
        while start < len(trace.t) - 1:
            end = min(start + per_window, len(trace.t) - 1)
            if trace.t[end] - trace.t[start] < 1.0 - 1e-9:
                break
            windows.append(self._window(trace, samples, start, end))
            start = end
        events = self._events(trace, samples)
        if not windows:
            return {"pdms": None, "windows": [], "events": events, "note": "episode shorter than 1 s: no window"}
        dev = np.abs([s["d"] for s in samples])
        return {
            **episode_terms(windows, planned_s),
            "windows": windows,
            "lane_deviation_m": {"mean": float(dev.mean()), "max": float(dev.max())},
            "events": events,
        }

    def _window(self, trace: Trace, samples: list[dict[str, Any]], i0: int, i1: int) -> dict[str, Any]:
        idx = range(i0, i1 + 1)
        t = np.array([trace.t[i] for i in idx])
        states = [trace.states[i] for i in idx]
        nc, collided, fault_at = 1.0, set(), None
        for i in idx:
            st, geo = trace.states[i], samples[i]
            for j in geo["contacts"]:
                if j in collided:
                    continue
                if self._at_fault(st, geo, j, trace.t[i]):
                    nc = min(nc, 0.0 if self.world.obstacles[j].agent else 0.5)
                    fault_at = trace.t[i] if fault_at is None else fault_at
                else:
                    collided.add(j)
        dac = 0.0 if any(not samples[i]["on_road"] for i in idx) else 1.0
        raw = max(0.0, samples[i1]["s"] - samples[i0]["s"])
        reference = self.reference_progress(trace.states[i0], samples[i0]["s"], trace.t[i0], trace.t[i1])
        multiplier = nc * dac
        ep = ego_progress(raw * multiplier, reference)
        if multiplier == 0.0:
            ep = 0.0
        ttc = self._ttc(trace, samples, idx, collided)
        terms = comfort_terms(t, states, np.array([trace.yaw_rate[i] for i in idx]))
        ok = comfortable(terms)
        c = 1.0 if all(ok.values()) else 0.0
        pdms = multiplier * (WEIGHTS["ep"] * ep + WEIGHTS["ttc"] * ttc + WEIGHTS["c"] * c) / sum(WEIGHTS.values())
        return {
            "t0": float(t[0]),
            "t1": float(t[-1]),
            "nc": nc,
            "dac": dac,
            "ep": ep,
            "ttc": ttc,
            "c": c,
            "pdms": float(pdms),
            "progress_m": raw,
            "reference_progress_m": reference,
            "comfort": terms,
            "comfort_ok": ok,
            "collision_t": fault_at,
        }

    def _at_fault(self, ego: VehicleState, geo: dict[str, Any], j: int, t: float) -> bool:
        if ego.v < STOPPED_SPEED:
            return False  # the ego stands: hit by the other
        box, _pose, speed = self._obstacle_box(j, t)
        if speed < STOPPED_SPEED:
            return True
        corners = geo["corners"]
        if _segment_hits(corners[0], corners[1], box):  # the front edge
            return True
        return bool(geo["multi_lane"] or not geo["on_road"])

    def _ttc(self, trace: Trace, samples: list[dict[str, Any]], idx: range, collided: set[int]) -> float:
        for i in idx:
            st = trace.states[i]
            if st.v < TTC_STOPPED_SPEED:
                continue
            corners = samples[i]["corners"]
            step = np.array([math.cos(st.yaw), math.sin(st.yaw)]) * st.v
            for j in self._near(st, trace.t[i], 15.0 + st.v):
                if j in collided:
                    continue
                for dt in TTC_OFFSETS_S:
                    box, (ox, oy, _), _ = self._obstacle_box(j, trace.t[i] + dt)
                    if not polygons_intersect(corners + step * dt, box):
                        continue
                    angle = _relative_angle(st, ox, oy)
                    risky = samples[i]["multi_lane"] or not samples[i]["on_road"]
                    if angle < math.radians(30.0) or (risky and angle <= math.radians(150.0)):
                        return 0.0
        return 1.0

    def reference_progress(self, state: VehicleState, s0: float, t0: float, t1: float) -> float:
        """The progress (m) of the reference planner (IDM along the route, PDM-Closed's parameters) from the ego's
        speed at ``t0`` until ``t1``, from the body centre's arc length ``s0``."""
        rear_s = s0 - self.limits.centre_offset
        return idm_rollout(self.world, rear_s, state.v, t0, t1 - t0, self.limits).progress_m

    def _events(self, trace: Trace, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Where something happened: first contact with each object, leaving and re-entering the road."""
        events, seen, off = [], set(), False
        for i, geo in enumerate(samples):
            for j in geo["contacts"]:
                if j not in seen:
                    seen.add(j)
                    kind = "a vehicle" if self.world.obstacles[j].agent else "an object"
                    events.append({"t": trace.t[i], "kind": "contact", "text": f"contact with {kind} (#{j})"})
            if not geo["on_road"] and not off:
                events.append({"t": trace.t[i], "kind": "off_road", "text": "a corner left the drivable area"})
            if geo["on_road"] and off:
                events.append({"t": trace.t[i], "kind": "on_road", "text": "back on the drivable area"})
            off = not geo["on_road"]
        return events
