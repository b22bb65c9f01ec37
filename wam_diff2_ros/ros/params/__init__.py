"""The node's parameters: names, defaults, descriptions, validation into a :class:`NodeConfig`.

No rclpy import: the node declares :data:`PARAMETER_SPECS` and validates what it reads with
:meth:`NodeConfig.from_parameters`; the replay tool reads the same YAML with
:func:`load_parameters_file` and gets the same :class:`NodeConfig`. Every problem is collected and
raised together as one :class:`ParameterError` naming each parameter.

``config/wam_diff2.yaml`` documents every parameter (a test keeps it in step with this table).

Modules: :mod:`.specs` (the table, defaults from the core configs), :mod:`.config` (:class:`NodeConfig`),
:mod:`.reader` (validation, rules, YAML).
"""

from .config import CameraConfig, NodeConfig, QosSettings
from .reader import (
    ParameterRule,
    change_problems,
    flatten_parameters,
    load_parameters_file,
    parameter_rules,
    validation_problems,
)
from .specs import (
    DEFAULT_NODE_NAME,
    DEVICES_HINT,
    DTYPES,
    DURABILITIES,
    LIVE_PREFIXES,
    PARAMETER_SPECS,
    QOS_INPUTS,
    READ_ONLY_PARAMETERS,
    RECONFIGURE_PARAMETERS,
    RELIABILITIES,
    SPEC_BY_NAME,
    TRANSPORTS,
    ParameterError,
    ParameterSpec,
    needs_reconfigure,
)

__all__ = [
    "DEFAULT_NODE_NAME",
    "DEVICES_HINT",
    "DTYPES",
    "DURABILITIES",
    "LIVE_PREFIXES",
    "PARAMETER_SPECS",
    "QOS_INPUTS",
    "READ_ONLY_PARAMETERS",
    "RECONFIGURE_PARAMETERS",
    "RELIABILITIES",
    "SPEC_BY_NAME",
    "TRANSPORTS",
    "CameraConfig",
    "NodeConfig",
    "ParameterError",
    "ParameterRule",
    "ParameterSpec",
    "QosSettings",
    "change_problems",
    "flatten_parameters",
    "load_parameters_file",
    "needs_reconfigure",
    "parameter_rules",
    "validation_problems",
]
