"""Typed parameter declarations and the on-set guard of the node, derived from :mod:`.params`.

Every entry of :data:`~.params.PARAMETER_SPECS` is declared with its type (from the default), a
``ParameterDescriptor`` with the description, the range validation checks (recorded by
:func:`~.params.parameter_rules`: ``integer_range`` / ``floating_point_range``, exclusive bounds and
choices in ``additional_constraints``) and ``read_only`` for :data:`~.params.READ_ONLY_PARAMETERS`.
rclpy itself then refuses a value of the wrong type or out of range; :func:`evaluate_change` adds the
full validation (cross-parameter rules, exclusive bounds, choices) and the lifecycle rule (a parameter
that shapes the model, subscriptions or publishers is refused on a configured node).

Set requests get the same lenience as overrides (:func:`screen_set_request`, an rclpy pre-set callback): an
integer for a double parameter is converted; a value of another wrong type is refused by the on-set callback with
the types by name (:func:`type_refusal`). Overrides (``--params-file``, ``-p``) of the wrong type or out of
range would make rclpy raise while the node is constructed; :func:`declare_typed_parameters` takes them out
instead (an integer for a double is converted) and returns them, so configure fails with the reason and the
node stays up.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.parameter import Parameter

from .params import (
    PARAMETER_SPECS,
    READ_ONLY_PARAMETERS,
    SPEC_BY_NAME,
    ParameterRule,
    ParameterSpec,
    change_problems,
    needs_reconfigure,
    parameter_rules,
)

INT64_MAX = 2**63 - 1


def parameter_type(spec: ParameterSpec) -> Parameter.Type:
    """The declared type: the default's (a list of strings → STRING_ARRAY, of numbers → DOUBLE_ARRAY)."""
    return Parameter.Type.from_parameter_value(spec.default)


def descriptor(spec: ParameterSpec, rule: ParameterRule) -> ParameterDescriptor:
    """The ``ParameterDescriptor`` of one parameter (see the module docstring)."""
    kind = parameter_type(spec)
    constraint = rule.describe()
    live = "read at start only" if spec.name in READ_ONLY_PARAMETERS else None
    if live is None:
        live = "change needs a reconfigure" if needs_reconfigure(spec.name) else "applies live"
    result = ParameterDescriptor(
        name=spec.name,
        type=kind.value,
        description=spec.description,
        additional_constraints="; ".join(part for part in (constraint, live) if part),
        read_only=spec.name in READ_ONLY_PARAMETERS,
    )
    if kind == Parameter.Type.INTEGER and (rule.minimum is not None or rule.maximum is not None):
        low = -INT64_MAX - 1 if rule.minimum is None else math.ceil(rule.minimum)
        high = INT64_MAX if rule.maximum is None else math.floor(rule.maximum)
        result.integer_range = [IntegerRange(from_value=int(low), to_value=int(high), step=0)]
    if kind == Parameter.Type.DOUBLE and (rule.minimum is not None or rule.maximum is not None):
        low = -sys.float_info.max if rule.minimum is None else float(rule.minimum)
        high = sys.float_info.max if rule.maximum is None else float(rule.maximum)
        result.floating_point_range = [FloatingPointRange(from_value=low, to_value=high, step=0.0)]
    return result


def descriptors() -> dict[str, ParameterDescriptor]:
    """The descriptor of every parameter in :data:`PARAMETER_SPECS`, by name."""
    rules = parameter_rules()
    return {spec.name: descriptor(spec, rules[spec.name]) for spec in PARAMETER_SPECS}


def _coerce(value: Any, kind: Parameter.Type) -> tuple[bool, Any]:
    """(ok, value of ``kind``) for an override of another type: integers → doubles, empty lists → the array
    type; anything else is not converted."""
    if kind == Parameter.Type.DOUBLE and isinstance(value, int) and not isinstance(value, bool):
        return True, float(value)
    numbers = isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    )
    if kind == Parameter.Type.DOUBLE_ARRAY and numbers:
        return True, [float(v) for v in value]
    empty = isinstance(value, (list, tuple, bytes)) and len(value) == 0
    if kind in (Parameter.Type.STRING_ARRAY, Parameter.Type.DOUBLE_ARRAY) and empty:
        return True, []
    return False, value


def _in_range(value: Any, desc: ParameterDescriptor) -> bool:
    if desc.integer_range and isinstance(value, int):
        bounds = desc.integer_range[0]
        return bounds.from_value <= value <= bounds.to_value
    if desc.floating_point_range and isinstance(value, float):
        bounds = desc.floating_point_range[0]
        return bounds.from_value <= value <= bounds.to_value  # NaN fails
    return True


def declare_typed_parameters(node: Any) -> dict[str, Any]:
    """Declare every parameter on ``node`` (typed, with its descriptor); returns the overrides that were taken
    out because their type or range is wrong (name → the value given), for configure to report."""
    overrides: dict[str, Parameter] = getattr(node, "_parameter_overrides", None) or {}
    rejected: dict[str, Any] = {}
    for name, desc in descriptors().items():
        spec = SPEC_BY_NAME[name]
        kind = Parameter.Type(desc.type)
        override = overrides.get(name)
        if override is not None:
            value = override.value
            ok = override.type_ == kind
            if not ok:
                ok, value = _coerce(value, kind)
                if ok:
                    overrides[name] = Parameter(name, kind, value)
            if not ok or not _in_range(value, desc):
                rejected[name] = override.value
                del overrides[name]
        node.declare_parameter(name, spec.default, desc)
    return rejected


TYPE_NAMES = {
    Parameter.Type.NOT_SET: "not set",
    Parameter.Type.BOOL: "bool",
    Parameter.Type.INTEGER: "integer",
    Parameter.Type.DOUBLE: "double",
    Parameter.Type.STRING: "string",
    Parameter.Type.BYTE_ARRAY: "byte array",
    Parameter.Type.BOOL_ARRAY: "bool array",
    Parameter.Type.INTEGER_ARRAY: "integer array",
    Parameter.Type.DOUBLE_ARRAY: "double array",
    Parameter.Type.STRING_ARRAY: "string array",
}


class WrongType(Parameter):
    """A set request's value of the wrong type, stood in by the parameter's current value: rclpy's own type check
    (whose reason names the types by their codes, "expected '3' got '4'") passes it on to the on-set callback,
    which refuses it with :attr:`reason` (the types by name)."""

    def __init__(self, given: Parameter, declared: Parameter.Type, current: Any) -> None:
        super().__init__(given.name, declared, current)
        self.reason = (
            f"{given.name}: wrong parameter type, expected {TYPE_NAMES[declared]}, got "
            f"{TYPE_NAMES[given.type_]} {given.value!r}"
        )


def screen_set_request(
    parameters: list[Parameter], declared: Mapping[str, Parameter.Type], current: Callable[[str], Any]
) -> list[Parameter]:
    """The node's pre-set callback: integers for double parameters (``ros2 param set /wam_diff2 planning.rate_hz
    5``) and empty lists for array parameters converted to the declared type; any other value of the wrong type
    becomes a :class:`WrongType` (with ``current(name)`` as its value) for :func:`type_refusal`."""
    result = []
    for parameter in parameters:
        kind = declared.get(parameter.name)
        if kind is not None and parameter.type_ not in (kind, Parameter.Type.NOT_SET):
            ok, value = _coerce(parameter.value, kind)
            parameter = (
                Parameter(parameter.name, kind, value) if ok else WrongType(parameter, kind, current(parameter.name))
            )
        result.append(parameter)
    return result


def type_refusal(parameters: list[Parameter]) -> str | None:
    """The refusal of a set request for its values of the wrong type (see :class:`WrongType`); None if none."""
    return "; ".join(p.reason for p in parameters if isinstance(p, WrongType)) or None


@dataclass(frozen=True)
class ChangeVerdict:
    """What to do with a parameter set request: refuse (``reason``), or accept and maybe apply live."""

    successful: bool
    reason: str = ""
    live: tuple[str, ...] = ()  # accepted names to apply now (configured node)


def evaluate_change(
    current: Mapping[str, Any], changes: Mapping[str, Any], configured: bool, require_model: bool = True
) -> ChangeVerdict:
    """Decide on a set request: ``changes`` (name → new value, this node's parameters only) on top of
    ``current`` values, for a node that is ``configured`` (inactive or active) or not."""
    changed = {name: value for name, value in changes.items() if current.get(name) != value}
    if not changed:
        return ChangeVerdict(True)
    problems = change_problems(current, changed, require_model=require_model and configured)
    if problems:
        return ChangeVerdict(False, "; ".join(problems))
    if not configured:
        return ChangeVerdict(True)  # read at the next configure
    later = sorted(name for name in changed if needs_reconfigure(name))
    if later:
        return ChangeVerdict(
            False,
            f"{', '.join(later)} takes effect after reconfigure: deactivate and clean up the node, set it, "
            "then configure (ros2 lifecycle set <node> deactivate / cleanup / configure)",
        )
    return ChangeVerdict(True, live=tuple(sorted(changed)))
