"""Closed-loop scenarios: the file format (:func:`load_scenarios`, :class:`ScenarioSpec`) and the world an
episode drives in (:class:`World`: the road, the route's speed and commands, the actors, the renderer's
textures). The format is documented in docs/closed_loop.md; every key is checked before anything runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wam_diff2_ros.drive.vehicle import VehicleLimits
from wam_diff2_ros.sim.road import ASPHALT_D, COMMAND_LEAD_S, LANE_WIDTH, MAX_SECONDS, Road
from wam_diff2_ros.sim.scenario import Actor, Scenario, _car, _pole, _random_car_colour, _tree, _value_noise

#: Keys of a scenario and of its sub-mappings; anything else is an error.
SCENARIO_KEYS = {
    "name",
    "road",
    "seed",
    "duration_s",
    "speed_mps",
    "turn_speed_mps",
    "start",
    "lead",
    "stopped",
    "scenery",
    "description",
}
START_KEYS = {"offset_m", "heading_deg", "speed_mps"}
LEAD_KEYS = {"gap_m", "speed_mps"}
STOPPED_KEYS = {"s_m"}
PIECE_KEYS = {"straight", "left", "right"}
ARC_KEYS = {"radius_m", "angle_deg"}
TURN_MIN_DEG = 45.0  # arcs turning at least this much are turns (a left/right command); gentler ones are lane following
TURN_LATERAL_ACCEL = 2.0  # m/s²: the route's default speed in a turn, sqrt(a R)
ROUTE_DECEL = 1.5  # m/s²: how the route's speed falls before a turn and rises after it
ROAD_MARGIN_M = 80.0  # the road must reach this far beyond where the route's speed could take the car
BUILTIN = Path(__file__).with_name("scenarios.yaml")
VALIDATION = Path(__file__).with_name("validation_scenarios.yaml")  # for choosing the demo model's weights


class ScenarioError(ValueError):
    """A scenario file or entry that cannot run (the message says which key and why)."""


@dataclass(frozen=True)
class ScenarioSpec:
    """One scenario as written (validated); ``road`` is ``"sample"`` or ``((kind, length or radius, angle), ...)``."""

    name: str
    road: str | tuple[tuple[str, float, float], ...]
    seed: int = 5000
    duration_s: float = 20.0
    speed_mps: float = 8.0
    turn_speed_mps: float | None = None
    start_offset_m: float = 0.0
    start_heading_deg: float = 0.0
    start_speed_mps: float | None = None
    lead: tuple[float, float] | None = None  # (gap m, speed m/s)
    stopped_s_m: float | None = None
    scenery: bool = True
    description: str = ""

    def with_seed(self, seed: int | None) -> ScenarioSpec:
        from dataclasses import replace

        return self if seed is None else replace(self, seed=int(seed))


def _number(where: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ScenarioError(f"{where}: expected a number, got {value!r}")
    if not low <= value <= high:
        raise ScenarioError(f"{where}: {value} is outside [{low:g}, {high:g}]")
    return float(value)


def _mapping(where: str, value: Any, keys: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where}: expected a mapping, got {value!r}")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {unknown} (known: {sorted(keys)})")
    return value


def parse_scenario(raw: Any, where: str = "scenario") -> ScenarioSpec:
    """A validated :class:`ScenarioSpec` from one parsed YAML/JSON mapping (raises :class:`ScenarioError`)."""
    data = _mapping(where, raw, SCENARIO_KEYS)
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ScenarioError(f"{where}: 'name' must be a non-empty string")
    where = f"scenario {name!r}"
    road_raw = data.get("road", "sample")
    if road_raw == "sample":
        road: str | tuple = "sample"
    elif isinstance(road_raw, list) and road_raw:
        pieces = []
        for i, piece in enumerate(road_raw):
            p = _mapping(f"{where}: road[{i}]", piece, PIECE_KEYS)
            if len(p) != 1:
                raise ScenarioError(f"{where}: road[{i}] must have exactly one of {sorted(PIECE_KEYS)}")
            kind, value = next(iter(p.items()))
            if kind == "straight":
                pieces.append(("straight", _number(f"{where}: road[{i}].straight", value, 1.0, 5000.0), 0.0))
            else:
                arc = _mapping(f"{where}: road[{i}].{kind}", value, ARC_KEYS)
                radius = _number(f"{where}: road[{i}].{kind}.radius_m", arc.get("radius_m"), 10.0, 5000.0)
                angle = _number(f"{where}: road[{i}].{kind}.angle_deg", arc.get("angle_deg"), 1.0, 180.0)
                pieces.append((kind, radius, angle))
        road = tuple(pieces)
    else:
        raise ScenarioError(f"{where}: 'road' must be 'sample' or a non-empty list of pieces")
    start = _mapping(f"{where}: start", data.get("start", {}), START_KEYS)
    lead = data.get("lead")
    if lead is not None:
        lead_map = _mapping(f"{where}: lead", lead, LEAD_KEYS)
        lead = (
            _number(f"{where}: lead.gap_m", lead_map.get("gap_m"), 6.0, 300.0),
            _number(f"{where}: lead.speed_mps", lead_map.get("speed_mps"), 0.0, 30.0),
        )
    stopped = data.get("stopped")
    stopped_s = None
    if stopped is not None:
        stopped_s = _number(
            f"{where}: stopped.s_m", _mapping(f"{where}: stopped", stopped, STOPPED_KEYS).get("s_m"), 10.0, 5000.0
        )
    seed = data.get("seed", 5000)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ScenarioError(f"{where}: 'seed' must be an integer >= 0, got {seed!r}")
    scenery = data.get("scenery", True)
    if not isinstance(scenery, bool):
        raise ScenarioError(f"{where}: 'scenery' must be true or false, got {scenery!r}")
    turn_speed = data.get("turn_speed_mps")
    start_speed = start.get("speed_mps")
    return ScenarioSpec(
        name=name.strip(),
        road=road,
        seed=seed,
        duration_s=_number(f"{where}: duration_s", data.get("duration_s", 20.0), 1.0, 120.0),
        speed_mps=_number(f"{where}: speed_mps", data.get("speed_mps", 8.0), 1.0, 20.0),
        turn_speed_mps=None if turn_speed is None else _number(f"{where}: turn_speed_mps", turn_speed, 1.0, 20.0),
        start_offset_m=_number(f"{where}: start.offset_m", start.get("offset_m", 0.0), -5.0, 5.0),
        start_heading_deg=_number(f"{where}: start.heading_deg", start.get("heading_deg", 0.0), -30.0, 30.0),
        start_speed_mps=None if start_speed is None else _number(f"{where}: start.speed_mps", start_speed, 0.0, 20.0),
        lead=lead,
        stopped_s_m=stopped_s,
        scenery=scenery,
        description=str(data.get("description", "")),
    )


def load_scenarios(source: str | Path) -> list[ScenarioSpec]:
    """The scenarios of a YAML/JSON file (one mapping, or ``scenarios: [...]``), or the built-in one named
    ``source`` (``all`` = every built-in scenario). ``FILE:NAME`` picks one scenario of a file."""
    import yaml

    text = str(source)
    path, _, pick = text.partition(":") if not Path(text).is_file() and ":" in text else (text, "", "")
    if Path(path).is_file():
        file = Path(path)
    else:
        file, pick = BUILTIN, text
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{file}: cannot read it ({exc})") from None
    entries = raw.get("scenarios") if isinstance(raw, Mapping) and "scenarios" in raw else [raw]
    if not isinstance(entries, list) or not entries:
        raise ScenarioError(f"{file}: expected a scenario mapping or 'scenarios: [...]'")
    specs = [parse_scenario(entry, f"{file}: scenarios[{i}]") for i, entry in enumerate(entries)]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ScenarioError(f"{file}: scenario names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")
    if pick and pick != "all":
        chosen = [s for s in specs if s.name == pick]
        if not chosen:
            where = "the built-in scenarios" if file == BUILTIN else str(file)
            raise ScenarioError(f"no scenario {pick!r} in {where} (there: {', '.join(names)})")
        return chosen
    return specs


@dataclass
class Obstacle:
    """An actor the ego can hit: its box (half length, half width about the actor's pose) and whether it is an
    agent (a vehicle: NAVSIM's no-collision term 0) or a static object (0.5)."""

    actor: Actor
    half_length: float
    half_width: float
    agent: bool


@dataclass
class World:
    """What an episode drives in; duck-types the renderer's scenario (``road``, ``actors``, textures)."""

    spec: ScenarioSpec
    road: Road
    actors: list[Actor]
    obstacles: list[Obstacle]
    ground_texture: np.ndarray
    cloud_texture: np.ndarray
    route_speed: Callable[[np.ndarray], np.ndarray]  # m/s at arc length s
    turns: list[tuple[float, float, str]]  # (s entry, s exit, "left"/"right")
    start_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def command(self, s: float, speed: float) -> str:
        """The route's command at arc length ``s``: left/right from COMMAND_LEAD_S ahead of a turn until its
        exit (as the sample drive's), else straight."""
        for entry, leave, kind in self.turns:
            if entry - COMMAND_LEAD_S * max(speed, 1.0) <= s < leave:
                return kind
        return "straight"

    def frenet(self, x: np.ndarray, y: np.ndarray, near_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Arc length and lateral offset (left +) of world points w.r.t. the ego lane centre."""
        return self.road.project(
            np.atleast_1d(np.asarray(x, float)), np.atleast_1d(np.asarray(y, float)), near_s, 400.0
        )


# The ego's height (Pacifica): parts whose underside is higher (a street light's arm, a tree's canopy) are not hit.
GROUND_PART_M = 1.777


def _box_of(actor: Actor) -> tuple[float, float]:
    """Half length and half width of the actor's parts that reach below :data:`GROUND_PART_M`."""
    low = [(c, s) for c, s, _ in actor.parts if c[2] - s[2] / 2 < GROUND_PART_M]
    return max(abs(c[0]) + s[0] / 2 for c, s in low), max(abs(c[1]) + s[1] / 2 for c, s in low)


def _is_car(actor: Actor) -> bool:
    return len(actor.parts) == 6  # sim.scenario._car: four wheels, body, cabin


def build_world(spec: ScenarioSpec, limits: VehicleLimits | None = None) -> World:
    """The :class:`World` of ``spec`` (raises :class:`ScenarioError` when the route would leave the road)."""
    limits = limits or VehicleLimits()
    rng = np.random.default_rng(spec.seed)
    if spec.road == "sample":
        sc = Scenario(MAX_SECONDS, spec.seed)  # the longest world: a shorter --duration cuts it, never changes it
        road, actors = sc.road, list(sc.actors)
        ground, clouds = sc.ground_texture, sc.cloud_texture

        def speed(s: np.ndarray) -> np.ndarray:
            return sc.speed(np.asarray(s, float))[0]

        a0, a1 = road.left_arc
        turns = [(a0, a1, "left")]
    else:
        road, turns = _build_road(spec.road)
        ground, clouds = _value_noise(rng, 256, 8), _value_noise(rng, 256, 32)
        speed = _route_speed(road, spec)
        actors = []
    max_speed = max(float(np.max(speed(np.arange(0.0, road.length, 1.0)))), spec.start_speed_mps or 0.0)
    reach = max_speed * spec.duration_s + ROAD_MARGIN_M
    if reach > road.length:
        raise ScenarioError(
            f"scenario {spec.name!r}: the route leaves the road: {spec.duration_s:g} s at up to {max_speed:.1f} m/s "
            f"needs {reach:.0f} m of road (with {ROAD_MARGIN_M:g} m beyond), the road is {road.length:.0f} m"
        )
    half = limits.width / 2
    if spec.start_offset_m - half < ASPHALT_D[0] or spec.start_offset_m + half > ASPHALT_D[1]:
        raise ScenarioError(
            f"scenario {spec.name!r}: the route leaves the road at the start: start.offset_m {spec.start_offset_m:g} "
            f"puts the ego's side outside the asphalt [{ASPHALT_D[0]:g}, {ASPHALT_D[1]:g}] m"
        )
    if spec.stopped_s_m is not None and spec.stopped_s_m > road.length - 10.0:
        raise ScenarioError(f"scenario {spec.name!r}: stopped.s_m {spec.stopped_s_m:g} is beyond the road")
    if spec.road != "sample":
        actors += _scenery(rng, road, reach, turns) if spec.scenery else []
        actors += _traffic(rng, road, spec)
    obstacles = [Obstacle(a, *_box_of(a), agent=_is_car(a)) for a in actors if _is_car(a) or a.static_xy is not None]
    return World(spec, road, actors, obstacles, ground, clouds, speed, turns)


def _build_road(pieces: tuple[tuple[str, float, float], ...]) -> tuple[Road, list[tuple[float, float, str]]]:
    chain: list[tuple[float, float]] = []
    for kind, size, angle in pieces:
        if kind == "straight":
            chain.append((size, 0.0))
        else:
            sign = 1.0 if kind == "left" else -1.0
            chain.append((size * math.radians(angle), sign / size))
    road = Road.build(chain)
    turns = []
    for segment, (kind, _size, angle) in zip(road.segments, pieces, strict=True):
        if kind != "straight" and angle >= TURN_MIN_DEG:
            turns.append((segment.s0, segment.s0 + segment.length, kind))
    return road, turns


def _route_speed(road: Road, spec: ScenarioSpec) -> Callable[[np.ndarray], np.ndarray]:
    """The route's speed: ``speed_mps``, down to the turn speed over each arc (ramps at ROUTE_DECEL)."""
    arcs = [(g.s0, g.s0 + g.length, abs(g.curvature)) for g in road.segments if g.curvature != 0.0]

    def speed(s: np.ndarray) -> np.ndarray:
        s = np.asarray(s, float)
        v = np.full(s.shape, spec.speed_mps)
        for a0, a1, kappa in arcs:
            vt = spec.turn_speed_mps or math.sqrt(TURN_LATERAL_ACCEL / kappa)
            vt = min(vt, spec.speed_mps)
            gap = np.where(s < a0, a0 - s, np.where(s > a1, s - a1, 0.0))
            v = np.minimum(v, np.sqrt(vt * vt + 2 * ROUTE_DECEL * gap))
        return v

    return speed


def _scenery(rng: np.random.Generator, road: Road, end_s: float, turns: list) -> list[Actor]:
    """Poles on the right, trees further out, a few cars parked on the right shoulder away from the turns."""
    actors: list[Actor] = []
    for s in np.arange(10.0, end_s, 28.0):
        x, y, yaw = (float(v[0]) for v in road.frenet_to_world(float(s), -4.3))
        actors.append(_pole(x, y, yaw))
    for _ in range(int(end_s / 8)):
        s = float(rng.uniform(0.0, end_s))
        d = float(rng.choice([-1, 1]) * rng.uniform(10.0, 16.0) + LANE_WIDTH / 2)
        x, y, _ = (float(v[0]) for v in road.frenet_to_world(s, d))
        if np.min(np.abs(road.project(np.array([x]), np.array([y]), s, 200.0)[1] - LANE_WIDTH / 2)) > 8.0:
            actors.append(_tree(x, y, rng))
    s = 25.0
    while s < end_s:
        s += float(rng.uniform(25.0, 70.0))
        if any(a - 20.0 < s < b + 10.0 for a, b, _ in turns):
            continue
        x, y, yaw = (float(v[0]) for v in road.frenet_to_world(s, -3.2))
        actors.append(_car(_random_car_colour(rng), rng, lambda _t, p=(x, y, yaw): p, (x, y)))
    return [a for a in actors if _clear_of_lane(road, a)]


def _clear_of_lane(road: Road, actor: Actor) -> bool:
    x, y, _ = actor.pose(0.0)
    _, d = road.project(np.array([x]), np.array([y]), 0.0, 1e9)
    return bool(not np.isfinite(d[0]) or d[0] < -2.9 or d[0] > LANE_WIDTH + 2.0)


def _traffic(rng: np.random.Generator, road: Road, spec: ScenarioSpec) -> list[Actor]:
    """The lead vehicle (constant speed in the ego lane) and the stopped vehicle of ``spec``."""
    out: list[Actor] = []
    if spec.lead is not None:
        gap, v = spec.lead

        def lead_pose(t: float) -> tuple[float, float, float]:
            x, y, yaw = road.pose(gap + v * t)
            return float(x[0]), float(y[0]), float(yaw[0])

        out.append(_car((0.62, 0.08, 0.07), rng, lead_pose, None))
    if spec.stopped_s_m is not None:
        x, y, yaw = (float(v[0]) for v in road.pose(spec.stopped_s_m))
        out.append(_car((0.85, 0.85, 0.86), rng, lambda _t: (x, y, yaw), (x, y)))
    return out
