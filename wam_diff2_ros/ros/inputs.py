"""The node's inputs, one table (:data:`INPUTS`): role → message type → topic → QoS → runtime handler.

Everything else about an input is derived from its row: the node's subscription (:func:`input_table`, wired by
``WamDiff2Node``), its ``qos.<key>.*`` parameters (:data:`QOS_INPUTS`, read by ``ros/params/specs.py``), and the
replay's side: which bag topic feeds it (:func:`wam_diff2_ros.replay.topics.select_topics` and ``routes``), its
``--<role>-topic`` flag and its ``replay.<role>_topic(s)`` key. A bag message reaches the handler the node's
subscription would hand it to, so a change here is a change in both.

Roles: ``image`` (``sensor_msgs/Image`` or ``CompressedImage`` by ``cameras.transports``) and ``camera_info``
per camera (``index`` = camera index), ``odometry``, ``acceleration``, ``command`` (``std_msgs/String``) and
``driving_command`` (``wam_diff2_ros/DrivingCommand``, the same input under its own topic name; only where the
package's messages import), and ``turn_indicators`` (Autoware's ``TurnIndicatorsCommand``, the command from the
route's turn signal): the command rows are used by ``command.source``. The VQA question topic is not an input of
the runtime: the node queues questions for its worker (:data:`~.topics.QUESTION_TOPIC`).

No ROS import at module level: the table names message types (``pkg/msg/Name``), so the parameter table and the
replay's command line read it without loading ROS; :func:`input_table` imports the classes when it builds rows.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wam_diff2_ros.core.samples import InputProblem

if TYPE_CHECKING:  # the parameter table imports this module: no import back into params at module level
    from .params import NodeConfig
    from .runtime import PlannerRuntime

#: ``(msg, receive_ns) → None or the problem that dropped the message``
Handler = Callable[[Any, int], InputProblem | None]
#: A camera's transports, in the order of an image input's ``msg_types`` and ``handlers``.
CAMERA_TRANSPORTS = ("raw", "compressed")
PACKAGE = "wam_diff2_ros"


@dataclass(frozen=True)
class InputSpec:
    """One kind of input: its role, message type(s), runtime handler(s) and QoS parameters."""

    role: str
    msg_types: tuple[str, ...]  # ROS type names; a camera image's by transport (CAMERA_TRANSPORTS order)
    handlers: tuple[str, ...]  # the PlannerRuntime method taking each type
    qos_key: str  # its qos.<key>.* parameters (several roles may share one)
    default_reliability: str = "best_effort"
    per_camera: bool = False  # one input per camera in cameras.names (the handler takes the camera index)
    name: str = ""  # its name in diagnostics (default: the role; per camera: "<role>_<n> (<camera>)")
    optional: bool = True  # the replay may run without it (`--<role>-topic none`)
    prefer_words: tuple[str, ...] = ()  # replay: of several topics of the type, the one whose name holds one
    command_source: str = ""  # a command input: used only when command.source is this

    @property
    def input_name(self) -> str:
        """The diagnostic name of a single input; inputs sharing one are alternatives (command, driving_command)."""
        return self.name or self.role

    @property
    def request_key(self) -> str:
        """``<role>_topics`` (per camera, a list) or ``<role>_topic``: the replay's ``replay.<key>`` parameter."""
        return f"{self.role}_topics" if self.per_camera else f"{self.role}_topic"

    @property
    def flag(self) -> str:
        """The replay's command-line flag (``--odometry-topic``; repeated per camera)."""
        return f"--{self.role.replace('_', '-')}-topic"

    @property
    def label(self) -> str:
        """The role in words (``driving command``)."""
        return self.role.replace("_", " ")

    def topic(self, index: int | None = None) -> str:
        """The node's private, remappable topic (``~/input/odometry``, ``~/input/image_<index>``)."""
        return f"~/input/{self.role}" if index is None else f"~/input/{self.role}_{index}"


INPUTS: tuple[InputSpec, ...] = (
    InputSpec(
        "image",
        ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"),
        ("on_image", "on_compressed_image"),
        "image",
        per_camera=True,
        optional=False,
    ),
    InputSpec("camera_info", ("sensor_msgs/msg/CameraInfo",), ("on_camera_info",), "camera_info", per_camera=True),
    InputSpec("odometry", ("nav_msgs/msg/Odometry",), ("on_odometry",), "odometry"),
    InputSpec("acceleration", ("geometry_msgs/msg/AccelWithCovarianceStamped",), ("on_acceleration",), "acceleration"),
    InputSpec(
        "command",
        ("std_msgs/msg/String",),
        ("on_command",),
        "command",
        "reliable",
        prefer_words=("command", "cmd"),
        command_source="topic",
    ),
    InputSpec(
        "driving_command",
        (f"{PACKAGE}/msg/DrivingCommand",),
        ("on_driving_command",),
        "command",
        "reliable",
        name="command",
        command_source="topic",
    ),
    InputSpec(
        "turn_indicators",
        ("autoware_vehicle_msgs/msg/TurnIndicatorsCommand",),
        ("on_turn_indicators",),
        "turn_indicators",
        "reliable",
        name="command",
        command_source="turn_indicators",
    ),
)
SPEC_BY_ROLE: dict[str, InputSpec] = {spec.role: spec for spec in INPUTS}
CAMERA_INPUTS = tuple(spec for spec in INPUTS if spec.per_camera)
SINGLE_INPUTS = tuple(spec for spec in INPUTS if not spec.per_camera)
#: The inputs with ``qos.<key>.*`` parameters, in table order, and the default reliability of each.
QOS_INPUTS: tuple[str, ...] = tuple(dict.fromkeys(spec.qos_key for spec in INPUTS))
QOS_DEFAULT_RELIABILITY: dict[str, str] = {key: SPEC_BY_ROLE[key].default_reliability for key in QOS_INPUTS}


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
