"""WAM-Diff2 as an egodriver policy (:class:`WamDiff2Driver`), for AlpaSim, for CARLA through
autoware_carla_scenario and for the package's own closed loop, over ``carla-driver-interface``'s contract.

Serve it with ``wam-diff2-egodriver --model demo --port 50051`` (``cli/egodriver.py``) or with
``carla-driver-interface serve --policy wam_diff2_ros.egodriver.policy:WamDiff2Driver --mode alpasim`` (the model
from ``WAM_DIFF2_MODEL``, the node's parameters from ``WAM_DIFF2_PARAMS``; :mod:`.config`). The model is loaded
once and shared by every session, one call at a time (:class:`~.session.ModelGate`); each session has its own
:class:`~.session.SessionPlanner` (its own runtime, command hold and plan in force), so sessions side by side do
not mix. docs/egodriver.md has the contract and the debug values.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from carla_driver_interface.driver import BaseDriver, DriveContext, DriveResult, SessionState

from .config import (
    DEFAULT_MODEL,
    MODEL_ENV,
    PARAMS_ENV,
    PolicyConfigError,
    PolicySettings,
    build_node_config,
    route_rule,
)
from .plan import comfortable_stop
from .session import SOURCE_STOP, ModelGate, SessionPlanner

logger = logging.getLogger(__name__)


class WamDiff2Driver(BaseDriver):
    """The planner behind the egodriver contract (see the module docstring).

    Args (all optional; ``--policy-arg KEY=VALUE`` of ``carla-driver-interface serve``):
        model: ``demo``, ``tiny`` or a checkpoint directory (default: ``$WAM_DIFF2_MODEL``, else ``demo``).
        params: a node parameter YAML (default: ``$WAM_DIFF2_PARAMS``, else none).
        camera: the planning camera's logical id (default: the first camera a session declares).
        cadence: ``free`` (plan on a new frame when the model is free, else answer with the plan in force) or
            ``wait`` (wait for the model call in progress, one at most, then plan if it is free).
        plan_interval_s: plan on a new frame only this long after the last planned frame (0: every new frame).
        route_lookahead_m, route_lateral_threshold_m: the route rule's parameters
            (:class:`~wam_diff2_ros.core.route_command.RouteRule`; default: the node parameters, else the rule's).
        device: ``model.device`` (cpu, cuda, ...).
        engine: an engine object to plan with instead of loading the model (tests).
        overrides: node parameters over the file's.
    """

    name = "wam_diff2"

    def __init__(
        self,
        model: str | None = None,
        params: str | None = None,
        camera: str = "",
        cadence: str = "free",
        plan_interval_s: float = 0.0,
        route_lookahead_m: float | None = None,
        route_lateral_threshold_m: float | None = None,
        device: str | None = None,
        engine: Any = None,
        overrides: dict[str, Any] | None = None,
    ) -> None:
        model = model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        params = params or os.environ.get(PARAMS_ENV) or None
        extra = dict(overrides or {})
        if device:
            extra["model.device"] = device
        self.config = build_node_config(model, params, extra)
        self.settings = PolicySettings(
            camera=camera,
            cadence=cadence,
            plan_interval_s=float(plan_interval_s),
            route_rule=route_rule(self.config, route_lookahead_m, route_lateral_threshold_m),
        )
        self.engine = engine if engine is not None else _load_engine(self.config)
        self.gate = ModelGate()
        self._planners: dict[str, SessionPlanner] = {}
        self._planners_lock = threading.Lock()
        logger.info("wam_diff2 policy: model %s on %s", self.config.model_path, self.config.device)

    def on_session_start(self, session: SessionState) -> None:
        """A planner for the session; a ValueError (the runtime gets FAILED_PRECONDITION) without the camera."""
        camera = self.settings.camera or next(iter(session.cameras), "")
        if not camera:
            raise ValueError("the session declares no camera; the policy needs one")
        if camera not in session.cameras:
            raise ValueError(f"camera {camera!r} is not declared; the session declares {sorted(session.cameras)}")
        planner = SessionPlanner(
            session,
            self.config,
            self.engine,
            camera,
            self.settings.route_rule,
            wait=self.settings.cadence == "wait",
            plan_interval_s=self.settings.plan_interval_s,
        )
        with self._planners_lock:
            self._planners[session.uuid] = planner

    def on_session_close(self, session: SessionState) -> None:
        with self._planners_lock:
            self._planners.pop(session.uuid, None)

    def on_egomotion(self, session: SessionState, new_poses: Any) -> None:
        """Non-finite poses are taken out of the session at once (:meth:`SessionPlanner.drop_non_finite_poses`)."""
        with self._planners_lock:
            planner = self._planners.get(session.uuid)
        if planner is not None:
            planner.drop_non_finite_poses(session)

    def drive(self, ctx: DriveContext) -> DriveResult:
        """Feed the session's new observations, plan when due, answer (:class:`~.session.SessionPlanner`)."""
        with self._planners_lock:
            planner = self._planners.get(ctx.session.uuid)
        if planner is None:  # the servicer starts every session it serves; a stop, should it not have
            trajectory = comfortable_stop(ctx.time_now_us, ctx.session.speed_mps())
            return DriveResult(trajectory, debug_scalars={"source": SOURCE_STOP, "error: no planner": 1.0})
        return planner.drive(ctx, self.gate)

    def close(self) -> None:
        """Close the engine (a policy served until its process ends need not)."""
        close = getattr(self.engine, "close", None)
        if callable(close):
            close()


def _load_engine(config: Any) -> Any:
    """The node's engine for ``config`` (its factory and its CPU thread count)."""
    import torch

    from wam_diff2_ros.ros.model_slot import cpu_threads_for
    from wam_diff2_ros.ros.node import load_engine

    threads = cpu_threads_for(config)
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    try:
        return load_engine(config)
    except Exception as exc:
        raise PolicyConfigError(f"model {config.model_path}: cannot be loaded: {type(exc).__name__}: {exc}") from exc
