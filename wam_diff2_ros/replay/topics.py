"""Which bag topic feeds which of the runtime's inputs: topic selection (:func:`select_topics`) and the
bag topic → input-table row map (:func:`routes`); the rows are the node's own (:mod:`wam_diff2_ros.ros.inputs`),
so a bag message reaches the handler the node's subscription would hand it to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wam_diff2_ros.replay.errors import ReplayUsageError
from wam_diff2_ros.ros.params.specs import DEFAULT_NODE_NAME
from wam_diff2_ros.ros.topics import OUTPUT_TOPICS as NODE_TOPICS
from wam_diff2_ros.ros.topics import absolute

if TYPE_CHECKING:  # the table needs rclpy's messages; the replay imports it when it runs
    from wam_diff2_ros.ros.inputs import InputRow

NODE_PREFIX = f"/{DEFAULT_NODE_NAME}"
#: The node's outputs the replay writes, under the node's own topic names (detections_2d and answers are not
#: replayed).
OUTPUT_TOPICS = {
    name: absolute(NODE_TOPICS[name], NODE_PREFIX)
    for name in ("path", "path_fixed", "trajectory", "trajectory_fixed", "markers", "detections", "debug_image")
}
BAG_DIR_NAME = "out"
OUTPUT_NAMES = (
    BAG_DIR_NAME,
    "predictions.jsonl",
    "detections.jsonl",
    "metrics.json",
    "report.html",
    "summary.txt",
    "plots",
)

IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"
ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
STRING_TYPE = "std_msgs/msg/String"
DRIVING_COMMAND_TYPE = "wam_diff2_ros/msg/DrivingCommand"
ACCELERATION_TYPE = "geometry_msgs/msg/AccelWithCovarianceStamped"
TF_TOPICS = ("/tf", "/tf_static")


NONE_WORDS = ("none", "off", "")


@dataclass
class TopicRequest:
    """Topics asked for by flags or the parameters file (None = choose by type, ``"none"`` = off)."""

    image_topics: list[str] | None = None
    camera_info_topics: list[str] | None = None
    odometry_topic: str | None = None
    command_topic: str | None = None
    driving_command_topic: str | None = None
    acceleration_topic: str | None = None

    def merged(self, fallback: TopicRequest) -> TopicRequest:
        """Fields of ``self``, where unset those of ``fallback``."""
        return TopicRequest(
            **{
                name: getattr(self, name) if getattr(self, name) is not None else getattr(fallback, name)
                for name in self.__dataclass_fields__
            }
        )


@dataclass
class TopicMap:
    """The bag topics feeding each input of the runtime (None = not used)."""

    images: list[tuple[str, str]]  # (topic, transport raw|compressed), camera order
    camera_infos: list[str | None]
    odometry: str | None
    command: str | None
    driving_command: str | None
    acceleration: str | None
    notes: list[str] = field(default_factory=list)

    def inputs(self) -> list[str]:
        """Every topic read as an input."""
        topics = [t for t, _ in self.images] + [t for t in self.camera_infos if t]
        topics += [t for t in (self.odometry, self.command, self.driving_command, self.acceleration) if t]
        return topics

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description (for metrics.json)."""
        return {
            "images": [{"topic": t, "transport": k} for t, k in self.images],
            "camera_infos": list(self.camera_infos),
            "odometry": self.odometry,
            "command": self.command,
            "driving_command": self.driving_command,
            "acceleration": self.acceleration,
        }


def _is_node_output(topic: str) -> bool:
    parts = topic.strip("/").split("/")
    return any(parts[i] == "wam_diff2" and parts[i + 1] in ("output", "debug") for i in range(len(parts) - 1))


def _is_off(value: str | None) -> bool:
    return value is not None and value.strip().lower() in NONE_WORDS


def _by_type(topics: Mapping[str, Any], *types: str) -> list[str]:
    return sorted(
        name for name, info in topics.items() if info.msgtype in types and not _is_node_output(name) and info.count > 0
    )


def _listing(topics: Mapping[str, Any], names: Sequence[str]) -> str:
    return ", ".join(f"{n} ({topics[n].msgtype}, {topics[n].count} msgs)" for n in names)


def _check_topic(topics: Mapping[str, Any], topic: str, flag: str, types: Sequence[str]) -> None:
    if topic not in topics:
        available = "\n    ".join(f"{n}  [{i.msgtype}, {i.count} msgs]" for n, i in topics.items())
        raise ReplayUsageError(f"{flag} {topic}: no such topic in the bag. The bag has:\n    {available}")
    if topics[topic].msgtype not in types:
        raise ReplayUsageError(f"{flag} {topic}: has type {topics[topic].msgtype}, expected {' or '.join(types)}")


def _single(
    topics: Mapping[str, Any],
    requested: str | None,
    flag: str,
    types: Sequence[str],
    what: str,
    notes: list[str],
    prefer: Callable[[str], bool] | None = None,
) -> str | None:
    if _is_off(requested):
        notes.append(f"{what}: off ({flag} none)")
        return None
    if requested is not None:
        _check_topic(topics, requested, flag, types)
        return requested
    candidates = _by_type(topics, *types)
    if not candidates:
        if what != "command":
            notes.append(f"{what}: the bag has no {' / '.join(types)} topic")
        return None
    if len(candidates) > 1 and prefer is not None:
        preferred = [c for c in candidates if prefer(c)]
        if len(preferred) == 1:
            notes.append(f"{what}: {preferred[0]} (of {len(candidates)} {types[0]} topics, by its name)")
            return preferred[0]
    if len(candidates) > 1:
        raise ReplayUsageError(
            f"more than one {what} topic: {_listing(topics, candidates)}; choose one with {flag} TOPIC"
            + (f" (or {flag} none)" if what != "odometry" else "")
        )
    notes.append(f"{what}: {candidates[0]} (the only {' / '.join(types)} topic)")
    return candidates[0]


def _camera_info_for(image_topic: str, infos: Sequence[str]) -> str | None:
    """The image_transport convention: ``<ns>/image_raw[/compressed]`` → ``<ns>/camera_info``."""
    base = image_topic
    for suffix in ("/compressed",):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    parent = base.rsplit("/", 1)[0]
    candidate = f"{parent}/camera_info"
    return candidate if candidate in infos else None


def select_topics(topics: Mapping[str, Any], request: TopicRequest, num_cameras: int) -> TopicMap:
    """Map bag topics (name → :class:`~wam_diff2_ros.bag.TopicInfo`) to the runtime's inputs.

    Raises :class:`ReplayUsageError` for unknown or mistyped topics and for ambiguous choices.
    """
    notes: list[str] = []
    image_types = (IMAGE_TYPE, COMPRESSED_TYPE)
    if request.image_topics:
        image_topics = list(request.image_topics)
        for topic in image_topics:
            _check_topic(topics, topic, "--image-topic", image_types)
        if len(set(image_topics)) != len(image_topics):
            raise ReplayUsageError(f"--image-topic: a topic is given twice: {image_topics}")
    else:
        candidates = [c for c in _by_type(topics, *image_types) if not c.endswith("/compressedDepth")]
        if not candidates:
            raise ReplayUsageError(
                "the bag has no sensor_msgs/Image or sensor_msgs/CompressedImage topic; topics: "
                + (_listing(topics, list(topics)) or "none")
            )
        if len(candidates) > 1:
            raise ReplayUsageError(
                f"the bag has {len(candidates)} image topics: {_listing(topics, candidates)}; name the camera(s) "
                "with --image-topic TOPIC (repeat it per camera, front camera first)"
            )
        image_topics = candidates
        notes.append(f"camera: {candidates[0]} (the only image topic)")
    if len(image_topics) != num_cameras:
        raise ReplayUsageError(
            f"{len(image_topics)} image topic(s) {image_topics} but the parameters configure {num_cameras} "
            f"camera(s) (cameras.names); for several cameras set cameras.names and a prompt.template with one "
            "<image> per camera (--set or --params), and give one --image-topic per camera in that order"
        )
    images = [(t, "compressed" if topics[t].msgtype == COMPRESSED_TYPE else "raw") for t in image_topics]

    all_infos = _by_type(topics, CAMERA_INFO_TYPE)
    infos: list[str | None]
    if request.camera_info_topics:
        if len(request.camera_info_topics) != len(image_topics):
            raise ReplayUsageError(
                f"--camera-info-topic given {len(request.camera_info_topics)} time(s) for {len(image_topics)} "
                "camera(s); give one per camera (none for a camera without one)"
            )
        infos = []
        for topic in request.camera_info_topics:
            if _is_off(topic):
                infos.append(None)
            else:
                _check_topic(topics, topic, "--camera-info-topic", (CAMERA_INFO_TYPE,))
                infos.append(topic)
    else:
        infos = [_camera_info_for(t, all_infos) for t in image_topics]
        if len(image_topics) == 1 and infos[0] is None and len(all_infos) == 1:
            infos = [all_infos[0]]
        for (topic, _), info in zip(images, infos, strict=True):
            notes.append(
                f"camera info for {topic}: {info}"
                if info
                else f"camera info for {topic}: none (the debug image uses the fallback pinhole)"
            )

    odometry = _single(topics, request.odometry_topic, "--odometry-topic", (ODOMETRY_TYPE,), "odometry", notes)
    command = _single(
        topics,
        request.command_topic,
        "--command-topic",
        (STRING_TYPE,),
        "command",
        notes,
        prefer=lambda name: "command" in name.lower() or "cmd" in name.lower(),
    )
    driving_notes: list[str] = []
    driving = _single(
        topics,
        request.driving_command_topic,
        "--driving-command-topic",
        (DRIVING_COMMAND_TYPE,),
        "driving command",
        driving_notes,
    )
    if driving is not None or request.driving_command_topic is not None:
        notes += driving_notes
    if command is None and driving is None:
        notes.append("command: none; plans need one (or command.default, e.g. --set command.default=straight)")
    acceleration = _single(
        topics, request.acceleration_topic, "--acceleration-topic", (ACCELERATION_TYPE,), "acceleration", notes
    )
    return TopicMap(images, infos, odometry, command, driving, acceleration, notes)


def routes(topic_map: TopicMap, rows: Sequence[InputRow]) -> dict[str, InputRow]:
    """Bag topic → the row of the node's input table (:func:`wam_diff2_ros.ros.inputs.input_table`) it feeds,
    as the node's subscription of that input would; a topic whose input the table lacks is not fed."""
    by_input = {(row.role, row.index): row for row in rows}
    wanted: dict[str, tuple[str, int | None]] = {}
    for index, (topic, _) in enumerate(topic_map.images):
        wanted.setdefault(topic, ("image", index))
    for index, info in enumerate(topic_map.camera_infos):
        if info:
            wanted.setdefault(info, ("camera_info", index))
    for role in ("odometry", "acceleration", "command", "driving_command"):
        topic = getattr(topic_map, role)
        if topic:
            wanted.setdefault(topic, (role, None))
    return {topic: by_input[key] for topic, key in wanted.items() if key in by_input}
