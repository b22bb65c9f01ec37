"""The node's inputs, one table (:data:`INPUTS`): role → message type → topic → QoS → runtime handler.

Everything else about an input is derived from its row: the node's subscription
(:func:`~.input_rows.input_table` binds the rows to a config and a runtime, wired by ``WamDiff2Node``), its
``qos.<key>.*`` parameters (:data:`QOS_INPUTS`, read by ``ros/params/specs.py``), and the replay's side: which
bag topic feeds it (:func:`wam_diff2_ros.replay.topics.select_topics` and ``routes``), its ``--<role>-topic`` flag
and its ``replay.<role>_topic(s)`` key. A bag message reaches the handler the node's subscription would hand it
to, so a change here is a change in both.

Roles: ``image`` (``sensor_msgs/Image`` or ``CompressedImage`` by ``cameras.transports``) and ``camera_info``
per camera (``index`` = camera index), ``odometry``, ``acceleration``, ``command`` (``std_msgs/String``) and
``driving_command`` (``wam_diff2_ros/DrivingCommand``, the same input under its own topic name; only where the
package's messages import), and ``turn_indicators`` (Autoware's ``TurnIndicatorsCommand``, the command from the
route's turn signal), and ``route`` (``nav_msgs/Path``, the route's centre line: the command by the route rule,
``ros/route_input.py``); ``command.source`` says which command rows are used. The VQA question topic is not an
input of the runtime: the node queues questions for its worker (:data:`~.topics.QUESTION_TOPIC`).

No ROS import and nothing else of ``ros/``: the table names message types (``pkg/msg/Name``), so the parameter
table and the replay's command line read it without loading ROS; :func:`~.input_rows.input_table` imports the
classes when it builds rows.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    words_only: bool = False  # replay: only a topic whose name holds one of prefer_words (a common type)
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
    InputSpec(
        "route",
        ("nav_msgs/msg/Path",),
        ("on_route",),
        "route",
        "reliable",
        prefer_words=("route",),
        words_only=True,
        name="command",
        command_source="route",
    ),
)
SPEC_BY_ROLE: dict[str, InputSpec] = {spec.role: spec for spec in INPUTS}
CAMERA_INPUTS = tuple(spec for spec in INPUTS if spec.per_camera)
SINGLE_INPUTS = tuple(spec for spec in INPUTS if not spec.per_camera)
#: The inputs with ``qos.<key>.*`` parameters, in table order, and the default reliability of each.
QOS_INPUTS: tuple[str, ...] = tuple(dict.fromkeys(spec.qos_key for spec in INPUTS))
QOS_DEFAULT_RELIABILITY: dict[str, str] = {key: SPEC_BY_ROLE[key].default_reliability for key in QOS_INPUTS}
