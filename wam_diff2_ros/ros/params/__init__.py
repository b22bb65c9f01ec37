"""The node's parameters: names, defaults, descriptions, validation into a :class:`NodeConfig`.

No rclpy import: the node declares :data:`PARAMETER_SPECS` and validates what it reads with
:meth:`NodeConfig.from_parameters`; the replay tool reads the same YAML with
:func:`load_parameters_file` and gets the same :class:`NodeConfig`. Every problem is collected and
raised together as one :class:`ParameterError` naming each parameter.

``config/wam_diff2.yaml`` documents every parameter (a test keeps it in step with this table).

Modules, each importing only those before it: :mod:`.specs` (the table, defaults from the core configs),
:mod:`.reader` (:class:`ValueReader`: typed values, problems, rules; the YAML), :mod:`.cameras` (the camera
section), :mod:`.config` (:class:`NodeConfig` and its validation).
"""

from .cameras import CameraConfig
from .config import NodeConfig, QosSettings, change_problems, parameter_rules, validation_problems
from .reader import ParameterRule, ValueReader, flatten_parameters, load_parameters_file
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
    "ValueReader",
    "change_problems",
    "flatten_parameters",
    "load_parameters_file",
    "needs_reconfigure",
    "parameter_rules",
    "validation_problems",
]
