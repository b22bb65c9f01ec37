"""The node's inputs, one table: role → message type → topic → QoS → runtime handler (:func:`input_table`).

The node creates one subscription per row (``WamDiff2Node``), the replay hands each bag message to the row of
its topic (:func:`wam_diff2_ros.replay.topics.routes` and ``feed``), so a change here is a change in both.

Roles: ``image`` (``sensor_msgs/Image`` or ``CompressedImage`` by ``cameras.transports``) and ``camera_info``
per camera (``index`` = camera index), ``odometry``, ``acceleration``, ``command`` (``std_msgs/String``) and
``driving_command`` (``wam_diff2_ros/DrivingCommand``, the same role under its own topic name; only where the
package's messages import). The VQA question topic is not an input of the runtime: the node queues questions
for its worker (:data:`~.topics.QUESTION_TOPIC`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from geometry_msgs.msg import AccelWithCovarianceStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import String

from wam_diff2_ros.core.samples import InputProblem

from .params import NodeConfig
from .runtime import PlannerRuntime
from .topics import (
    ACCELERATION_TOPIC,
    COMMAND_TOPIC,
    DRIVING_COMMAND_TOPIC,
    ODOMETRY_TOPIC,
    camera_info_topic,
    image_topic,
)

#: ``(msg, receive_ns) → None or the problem that dropped the message``
Handler = Callable[[Any, int], InputProblem | None]


@dataclass(frozen=True)
class InputRow:
    """One input of the runtime (see the module docstring)."""

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


def input_table(config: NodeConfig, runtime: PlannerRuntime) -> list[InputRow]:
    """The runtime's inputs for ``config`` (cameras first, each followed by its camera info)."""
    rows: list[InputRow] = []
    for index, camera in enumerate(config.cameras):
        if camera.transport == "compressed":
            msg_type: type = CompressedImage
            on_image = runtime.on_compressed_image
        else:
            msg_type, on_image = Image, runtime.on_image
        rows.append(
            InputRow(
                "image",
                image_topic(index),
                msg_type,
                "image",
                runtime.image_input_name(index),
                functools.partial(on_image, index),
                index,
            )
        )
        rows.append(
            InputRow(
                "camera_info",
                camera_info_topic(index),
                CameraInfo,
                "camera_info",
                f"camera_info_{index} ({camera.name})",
                functools.partial(runtime.on_camera_info, index),
                index,
            )
        )
    rows += [
        InputRow("odometry", ODOMETRY_TOPIC, Odometry, "odometry", "odometry", runtime.on_odometry),
        InputRow(
            "acceleration",
            ACCELERATION_TOPIC,
            AccelWithCovarianceStamped,
            "acceleration",
            "acceleration",
            runtime.on_acceleration,
        ),
        InputRow("command", COMMAND_TOPIC, String, "command", "command", runtime.on_command),
    ]
    if runtime.msgs is not None:
        rows.append(
            InputRow(
                "driving_command",
                DRIVING_COMMAND_TOPIC,
                runtime.msgs.DrivingCommand,
                "command",
                "command",
                runtime.on_driving_command,
            )
        )
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
