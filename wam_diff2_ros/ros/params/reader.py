"""The public value reader of the parameters (:class:`ValueReader`: typed values, every problem collected, the
checks recorded as one :class:`ParameterRule` each) and the parameters YAML (:func:`load_parameters_file`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .specs import DEFAULT_NODE_NAME, PARAMETER_SPECS, SPEC_BY_NAME, ParameterError


@dataclass(frozen=True)
class ParameterRule:
    """What validation checks for one parameter, as recorded from :meth:`NodeConfig.from_parameters` (the
    typed ROS declarations derive their ranges and constraints from it; see :func:`parameter_rules`)."""

    kind: str  # boolean | integer | number | text | strings | numbers
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    choices: tuple[str, ...] | None = None

    def describe(self) -> str:
        """The constraint in words (``> 0``, ``in [0, 1]``, ``one of a|b``), '' without one."""
        if self.choices:
            return "one of " + "|".join(self.choices)
        low = None if self.minimum is None else ("> " if self.exclusive_minimum else ">= ") + f"{self.minimum:g}"
        high = None if self.maximum is None else ("< " if self.exclusive_maximum else "<= ") + f"{self.maximum:g}"
        return ", ".join(part for part in (low, high) if part)


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return "strings"
    return "numbers"


class ValueReader:
    """Reads typed parameter values (a wrong one: its default, and the problem collected in :attr:`errors`) and
    records what it checks (:attr:`rules`)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        """``values`` over the defaults."""
        self.values = {**{s.name: s.default for s in PARAMETER_SPECS}, **dict(values)}
        self.errors: list[str] = []
        self.rules: dict[str, ParameterRule] = {}

    def fail(self, name: str, problem: str) -> None:
        self.errors.append(f"{name}: {problem}")

    def fail_section(self, section: str, problem: str, errors_before: int) -> None:
        """A section's own check failed (a config class refused its values): reported only when none of its
        parameters was reported since ``errors_before``; otherwise it only repeats that parameter's problem."""
        if len(self.errors) == errors_before:
            self.fail(section, problem)

    def boolean(self, name: str) -> bool:
        self.rules.setdefault(name, ParameterRule("boolean"))
        value = self.values[name]
        if isinstance(value, bool):
            return value
        self.fail(name, f"expected true or false, got {value!r}")
        return bool(SPEC_BY_NAME[name].default)

    def integer(self, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
        self.rules.setdefault(name, ParameterRule("integer", minimum=minimum, maximum=maximum))
        value = self.values[name]
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                self.fail(name, f"expected an integer, got {value!r}")
                return int(SPEC_BY_NAME[name].default)
        if minimum is not None and value < minimum:
            self.fail(name, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            self.fail(name, f"must be <= {maximum}, got {value}")
        return int(value)

    def number(
        self,
        name: str,
        minimum: float | None = None,
        positive: bool = False,
        maximum: float | None = None,
        exclusive_maximum: bool = False,
    ) -> float:
        low = 0.0 if positive and minimum is None else minimum
        rule = ParameterRule("number", low, maximum, positive and minimum is None, exclusive_maximum)
        self.rules.setdefault(name, rule)
        value = self.values[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            self.fail(name, f"expected a finite number, got {value!r}")
            return float(SPEC_BY_NAME[name].default)
        number = float(value)
        if positive and number <= 0:
            self.fail(name, f"must be > 0, got {number:g}")
        if minimum is not None and number < minimum:
            self.fail(name, f"must be >= {minimum:g}, got {number:g}")
        if maximum is not None and (number >= maximum if exclusive_maximum else number > maximum):
            self.fail(name, f"must be {'<' if exclusive_maximum else '<='} {maximum:g}, got {number:g}")
        return number

    def text(self, name: str, choices: Sequence[str] | None = None) -> str:
        self.rules.setdefault(name, ParameterRule("text", choices=tuple(choices) if choices else None))
        value = self.values[name]
        if not isinstance(value, str):
            self.fail(name, f"expected a string, got {value!r}")
            return str(SPEC_BY_NAME[name].default)
        if choices is not None and value not in choices:
            self.fail(name, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def strings(self, name: str) -> list[str]:
        self.rules.setdefault(name, ParameterRule("strings"))
        value = self.values[name]
        if isinstance(value, str):
            return [value]
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
        if isinstance(value, (list, tuple, bytes)) and len(value) == 0:
            return []
        self.fail(name, f"expected a list of strings, got {value!r}")
        return list(SPEC_BY_NAME[name].default)

    def numbers(self, name: str) -> list[float]:
        self.rules.setdefault(name, ParameterRule("numbers"))
        value = self.values[name]
        if isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) for v in value
        ):
            return [float(v) for v in value]
        if isinstance(value, (list, tuple, bytes)) and len(value) == 0:
            return []
        self.fail(name, f"expected a list of finite numbers, got {value!r}")
        return []


def flatten_parameters(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested YAML mappings → dotted parameter names (``{"model": {"path": x}}`` → ``{"model.path": x}``)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_parameters(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def load_parameters_file(path: str | Path, node_name: str = DEFAULT_NODE_NAME) -> dict[str, Any]:
    """Parameters a ``--params-file`` YAML gives node ``node_name``: ``/**`` first, then sections that name
    the node (``wam_diff2``, ``/wam_diff2``, ``/<ns>/wam_diff2``), later ones winning, as rcl applies them."""
    import yaml

    with open(path, encoding="utf-8") as stream:
        document = yaml.safe_load(stream) or {}
    if not isinstance(document, Mapping):
        raise ParameterError(f"{path}: expected a mapping of node names to ros__parameters")
    result: dict[str, Any] = {}
    ordered = sorted(document.items(), key=lambda item: 0 if item[0] == "/**" else 1)
    for key, section in ordered:
        key = str(key)
        matches = key == "/**" or key.strip("/").split("/")[-1] == node_name
        if not matches:
            continue
        if not isinstance(section, Mapping) or "ros__parameters" not in section:
            raise ParameterError(f"{path}: section {key!r} has no ros__parameters")
        result.update(flatten_parameters(section["ros__parameters"] or {}))
    return result
