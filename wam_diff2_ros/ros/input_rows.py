"""The input table (:data:`~.inputs.INPUTS`) bound to a config and a runtime: one :class:`InputRow` per input the
node subscribes and the replay feeds (:func:`input_table`), and :func:`receive`, the one way a message reaches
its handler."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wam_diff2_ros.core.samples import InputProblem

from .inputs import CAMERA_INPUTS, CAMERA_TRANSPORTS, PACKAGE, SINGLE_INPUTS

if TYPE_CHECKING:
    from .params import NodeConfig
    from .runtime import PlannerRuntime

#: ``(msg, receive_ns) → None or the problem that dropped the message``
Handler = Callable[[Any, int], InputProblem | None]


@dataclass(frozen=True)
class InputRow:
    """One input of the runtime: a spec bound to a topic, a message class and a handler."""

    role: str
    topic: str  # the node's private, remappable topic
    msg_type: type
    qos_key: str  # the key in NodeConfig.qos
    name: str  # the input's name in diagnostics and problems
    handler: Handler
    index: int | None = None  # camera index (image, camera_info)

    @property
    def is_image(self) -> bool:
        """An image of a camera (planning at rate 0 follows the front one)."""
        return self.role == "image"


def _message_class(type_name: str, runtime: PlannerRuntime) -> type | None:
    """The class of ``pkg/msg/Name``; this package's own from the runtime's messages (None where not built)."""
    package, _, name = type_name.split("/")
    if package == PACKAGE:
        return None if runtime.msgs is None else getattr(runtime.msgs, name)
    return getattr(importlib.import_module(f"{package}.msg"), name)


def input_table(config: NodeConfig, runtime: PlannerRuntime) -> list[InputRow]:
    """The runtime's inputs for ``config``: per camera its image and camera info, then the single inputs (a
    row whose message type is not available, this package's own without built messages, is left out)."""
    rows: list[InputRow] = []
    for index, camera in enumerate(config.cameras):
        for spec in CAMERA_INPUTS:
            choice = CAMERA_TRANSPORTS.index(camera.transport) if len(spec.msg_types) > 1 else 0
            msg_type = _message_class(spec.msg_types[choice], runtime)
            if msg_type is not None:
                handler = functools.partial(getattr(runtime, spec.handlers[choice]), index)
                name = f"{spec.role}_{index} ({camera.name})"
                rows.append(InputRow(spec.role, spec.topic(index), msg_type, spec.qos_key, name, handler, index))
    for spec in SINGLE_INPUTS:
        if spec.command_source and spec.command_source != config.command_source:
            continue
        msg_type = _message_class(spec.msg_types[0], runtime)
        if msg_type is not None:
            handler = getattr(runtime, spec.handlers[0])
            rows.append(InputRow(spec.role, spec.topic(), msg_type, spec.qos_key, spec.input_name, handler))
    return rows


def input_names(rows: list[InputRow]) -> list[str]:
    """The inputs' diagnostic names, once each, in table order."""
    return list(dict.fromkeys(row.name for row in rows))


def receive(row: InputRow, msg: Any, receive_ns: int) -> InputProblem | None:
    """Hand ``msg`` to the row's handler; an unexpected exception becomes the row's problem (one bad message never
    ends the node or the replay)."""
    try:
        return row.handler(msg, receive_ns)
    except Exception as exc:
        return InputProblem(row.name, f"unexpected error: {type(exc).__name__}: {exc}")
