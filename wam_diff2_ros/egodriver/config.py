"""The policy's settings: the node's configuration for the model it serves, and the policy's own options.

The model comes from ``WAM_DIFF2_MODEL`` (``demo``, ``tiny`` or a checkpoint directory; default ``demo``) and the
node's parameters from an optional parameter YAML in ``WAM_DIFF2_PARAMS`` (the node's ``--params-file`` format),
unless the policy is built with ``model=`` / ``params=`` (``--policy-arg`` or ``wam-diff2-egodriver``). A few
parameters are the policy's to set, whatever the file says: one camera on the compressed transport (a session's
images arrive encoded), the command from the input topic (the policy feeds the route's command there), no debug
image, detection or VQA. ``command.default`` is ``straight`` unless the file sets it (a session without a route
still drives).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wam_diff2_ros.core.route_command import DEFAULT_LATERAL_THRESHOLD_M, DEFAULT_LOOKAHEAD_M, RouteRule
from wam_diff2_ros.ros.params import SPEC_BY_NAME, NodeConfig, ParameterError, load_parameters_file

MODEL_ENV = "WAM_DIFF2_MODEL"
PARAMS_ENV = "WAM_DIFF2_PARAMS"
DEFAULT_MODEL = "demo"
CADENCES = ("free", "wait")  # plan on a new frame when the model is free now / after waiting for one model call
DEFAULT_COMMAND = "straight"
#: Set by the policy whatever the parameter file says (see the module docstring).
FORCED_PARAMETERS: Mapping[str, Any] = {
    "cameras.transports": ["compressed"],
    "command.source": "topic",
    "debug.image": False,
    "detection.rate_hz": 0.0,
    "vqa.enabled": False,
    "autoware.outputs": False,
    "planning.frame_id": "base_link",
}
#: The node parameters of the route rule (read when the parameter table has them).
ROUTE_PARAMETERS = ("command.route_lookahead_m", "command.route_lateral_threshold_m")


class PolicyConfigError(ValueError):
    """A model, parameter file or policy option that cannot be used (nothing is served)."""


@dataclass(frozen=True)
class PolicySettings:
    """The policy's own options (beside the node's configuration)."""

    camera: str = ""  # the planning camera's logical id; "" = the first camera the session declares
    cadence: str = "free"  # one of CADENCES
    plan_interval_s: float = 0.0  # plan on a frame at least this long after the last planned one; 0 = every frame
    route_rule: RouteRule = field(default_factory=RouteRule)

    def __post_init__(self) -> None:
        if self.cadence not in CADENCES:
            raise PolicyConfigError(f"cadence must be one of {', '.join(CADENCES)}, got {self.cadence!r}")
        if not (math.isfinite(self.plan_interval_s) and self.plan_interval_s >= 0.0):
            raise PolicyConfigError(f"plan_interval_s must be a finite number >= 0, got {self.plan_interval_s!r}")


def model_path(model: str) -> str:
    """The checkpoint directory of ``model``: ``demo`` / ``tiny`` (the package's, built on first use) or a path."""
    from wam_diff2_ros.demo.resolve import ModelSpecError, model_directory

    if not str(model).strip():
        raise PolicyConfigError(f"no model: set {MODEL_ENV} (demo, tiny or a checkpoint directory)")
    try:
        return str(model_directory(model)[0])
    except ModelSpecError as exc:
        raise PolicyConfigError(f"model {str(model).strip()}: not available: {exc}") from None
    except NotADirectoryError as exc:
        raise PolicyConfigError(f"model {exc}") from None


def node_values(params: str | None, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The node's parameters: defaults, then the parameter file ``params``, then ``overrides``."""
    values = {spec.name: spec.default for spec in SPEC_BY_NAME.values()}
    values["command.default"] = DEFAULT_COMMAND
    if params:
        try:
            values.update(load_parameters_file(params))
        except (OSError, ParameterError) as exc:
            raise PolicyConfigError(f"parameter file {params}: {exc}") from None
    values.update(overrides or {})
    return values


def build_node_config(model: str, params: str | None = None, overrides: Mapping[str, Any] | None = None) -> NodeConfig:
    """The node's configuration the policy plans with (see the module docstring)."""
    values = node_values(params, overrides)
    explicit_dtype = "model.dtype" in (overrides or {}) or (bool(params) and _file_sets(params, "model.dtype"))
    values["model.path"] = model_path(model)
    if len(values.get("cameras.names") or []) != 1:
        raise PolicyConfigError(f"the policy plans on one camera; cameras.names is {values.get('cameras.names')}")
    values.update(FORCED_PARAMETERS)
    if not explicit_dtype:
        values["model.dtype"] = _default_dtype(str(values["model.device"]), str(values["model.dtype"]))
    try:
        return NodeConfig.from_parameters(values)
    except ParameterError as exc:
        raise PolicyConfigError(str(exc)) from None


def route_rule(
    config: NodeConfig, lookahead_m: float | None = None, lateral_threshold_m: float | None = None
) -> RouteRule:
    """The route rule: the arguments, else the node parameters where the table has them, else the rule's defaults."""
    lookahead = _number(lookahead_m, config.values.get(ROUTE_PARAMETERS[0]), DEFAULT_LOOKAHEAD_M)
    lateral = _number(lateral_threshold_m, config.values.get(ROUTE_PARAMETERS[1]), DEFAULT_LATERAL_THRESHOLD_M)
    try:
        return RouteRule(lookahead, lateral)
    except ValueError as exc:
        raise PolicyConfigError(str(exc)) from None


def _number(*choices: Any) -> float:
    for value in choices:
        if value is not None:
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise PolicyConfigError(f"expected a number, got {value!r}") from None
            if not math.isfinite(number):
                raise PolicyConfigError(f"expected a finite number, got {value!r}")
            return number
    raise AssertionError("unreachable: the last choice is a default")  # pragma: no cover


def _file_sets(params: str, name: str) -> bool:
    try:
        return name in load_parameters_file(params)
    except (OSError, ParameterError):
        return False


def _default_dtype(device: str, configured: str) -> str:
    """float32 on a CPU, else ``configured`` (core/checkpoint.py, the replay's and the closed loop's rule); a device
    that cannot be resolved keeps ``configured`` (loading the model reports it)."""
    from wam_diff2_ros.core.checkpoint import default_dtype

    try:
        return default_dtype(device, configured)
    except (ValueError, RuntimeError):
        return configured
