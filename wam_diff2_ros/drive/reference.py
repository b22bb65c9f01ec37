"""Reference planners that drive an episode in place of a model (``wam-diff2-drive --model expert`` or
``--model constant-velocity``), to read a model's score against.

Each is an engine (the ``generate``/``name`` of :class:`~wam_diff2_ros.core.planning.EngineLike`): it answers the
node's planning prompt with waypoint text, so its plans go through the same runtime, parser, kinematic, age and
confidence gates, latency, controller and scorer as a model's. Neither looks at the camera image.

- ``constant-velocity``: NAVSIM's ``ConstantVelocityAgent`` (autonomousvision/navsim,
  ``navsim/agents/constant_velocity_agent.py``): the current speed and heading held for 4 s, 8 waypoints at 0.5 s.
  It reads the speed from the prompt (the ego status any model gets).
- ``expert``: a privileged planner on the simulator's ground truth (the world, the ego's true state at the image's
  stamp, the actors' true motion), given by the episode through :meth:`ExpertEngine.attach`: the lane centre
  (an off-centre start blends back over :data:`BLEND_M`), the speed of IDM towards the route's speed behind lead
  and stopped vehicles with PDM-Closed's parameters (:mod:`wam_diff2_ros.drive.idm`; Dauner et al. 2023, Treiber et
  al. 2000), within IDM's comfortable limits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wam_diff2_ros.drive.episode import GroundTruth
from wam_diff2_ros.drive.idm import idm_rollout

EXPERT = "expert"
CONSTANT_VELOCITY = "constant-velocity"
REFERENCE_NAMES = (EXPERT, CONSTANT_VELOCITY)
WAYPOINTS = 8
WAYPOINT_DT_S = 0.5
BLEND_M = 15.0  # the expert returns to the lane centre over max(BLEND_M, 1.5 s of driving)
_VELOCITY = re.compile(r"velocity is: \(\s*([-+\d.eE]+)\s*,\s*([-+\d.eE]+)\s*\)")


def is_reference(model: str | None) -> bool:
    """Whether ``model`` names a reference planner."""
    return str(model or "").strip().lower() in REFERENCE_NAMES


@dataclass
class ReferenceGeneration:
    """What the pipeline reads of a generation (the text; no token probabilities: confidence unknown)."""

    text: str
    finished: bool = True
    steps_per_block: tuple[int, ...] = ()


class ReferenceEngine:
    """The engine interface of a reference planner; subclasses give :meth:`waypoints`."""

    name = "reference"
    device = "cpu"
    dtype = "float32"
    looks_at_images = False

    def generate(
        self,
        prompt: str,
        images: Sequence[Any] = (),
        decode: Any = None,
        system: str | None = None,
        started_ns: int | None = None,
    ) -> ReferenceGeneration:
        """The plan for the planning prompt, as the model's answer text ``x1, y1, ..., x8, y8`` (base_link, m)."""
        points = self.waypoints(prompt)
        return ReferenceGeneration(", ".join(f"{x:.3f}, {y:.3f}" for x, y in points))

    def waypoints(self, prompt: str) -> list[tuple[float, float]]:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to free."""


class ConstantVelocityEngine(ReferenceEngine):
    """NAVSIM's constant-velocity agent (see the module docstring)."""

    name = CONSTANT_VELOCITY

    def waypoints(self, prompt: str) -> list[tuple[float, float]]:
        match = _VELOCITY.search(prompt)
        if match is None:
            raise RuntimeError("constant-velocity planner: no 'velocity is: (vx,vy)' in the planning prompt")
        vx, vy = float(match.group(1)), float(match.group(2))
        return [(vx * WAYPOINT_DT_S * k, vy * WAYPOINT_DT_S * k) for k in range(1, WAYPOINTS + 1)]


class ExpertEngine(ReferenceEngine):
    """The privileged lane-centre + IDM planner (see the module docstring)."""

    name = EXPERT

    def __init__(self) -> None:
        self._truth: Callable[[], GroundTruth] | None = None

    def attach(self, ground_truth: Callable[[], GroundTruth]) -> None:
        """The episode's hook: called at each plan for the truth at the planned-on image's stamp."""
        self._truth = ground_truth

    def waypoints(self, prompt: str) -> list[tuple[float, float]]:
        if self._truth is None:
            raise RuntimeError("the expert planner needs the simulator's ground truth (it drives episodes only)")
        return expert_waypoints(self._truth())

    # the waypoints in world coordinates, for tests and the report
    def world_path(self, truth: GroundTruth) -> np.ndarray:
        return _expert_world(truth)


def _expert_world(truth: GroundTruth) -> np.ndarray:
    """(8, 2) world x, y of the expert's rear axle at 0.5 .. 4 s after the stamp."""
    world, state = truth.world, truth.state
    rollout = idm_rollout(world, truth.s, state.v, truth.t_s, WAYPOINTS * WAYPOINT_DT_S, truth.limits)
    times = np.arange(1, WAYPOINTS + 1) * WAYPOINT_DT_S
    s = np.interp(times, rollout.t, rollout.s)
    _, d0 = world.frenet(state.x, state.y, truth.s)
    blend = max(BLEND_M, 1.5 * state.v)
    u = np.clip((s - truth.s) / blend, 0.0, 1.0)
    d = float(d0[0]) * (1.0 - u * u * (3.0 - 2.0 * u))  # smoothstep back to the centre
    x, y, _ = world.road.frenet_to_world(s, d)
    return np.stack([x, y], axis=1)


def expert_waypoints(truth: GroundTruth) -> list[tuple[float, float]]:
    """The expert's 8 waypoints in base_link at the stamp (x forward, y left)."""
    points = _expert_world(truth)
    c, s = math.cos(truth.state.yaw), math.sin(truth.state.yaw)
    dx, dy = points[:, 0] - truth.state.x, points[:, 1] - truth.state.y
    return [(float(c * a + s * b), float(-s * a + c * b)) for a, b in zip(dx, dy, strict=True)]


def reference_engine(name: str) -> ReferenceEngine:
    """The reference planner named ``name`` (one of :data:`REFERENCE_NAMES`)."""
    key = name.strip().lower()
    if key == EXPERT:
        return ExpertEngine()
    if key == CONSTANT_VELOCITY:
        return ConstantVelocityEngine()
    raise ValueError(f"no reference planner {name!r} (known: {', '.join(REFERENCE_NAMES)})")


def reference_config(name: str, overrides: dict[str, Any] | None = None) -> Any:
    """The node configuration a reference planner runs under: the node's defaults and ``overrides`` (as a model's
    episode), with ``model_path`` the planner's name."""
    from dataclasses import replace

    from wam_diff2_ros.ros.params import SPEC_BY_NAME, NodeConfig

    values = {s.name: s.default for s in SPEC_BY_NAME.values()}
    values.update(overrides or {})
    values["model.path"] = ""
    values["model.dtype"] = "float32"
    return replace(NodeConfig.from_parameters(values, require_model=False), model_path=name.strip().lower())
