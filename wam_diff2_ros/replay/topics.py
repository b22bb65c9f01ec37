"""Which bag topic feeds which of the runtime's inputs: topic selection (:func:`select_topics`) and the
bag topic → input-table row map (:func:`routes`). The inputs, their message types and their flags come from the
node's own input table (:mod:`wam_diff2_ros.ros.inputs`), so a bag message reaches the handler the node's
subscription would hand it to, and an input added there is replayed without a change here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wam_diff2_ros.replay.errors import ReplayUsageError
from wam_diff2_ros.ros.inputs import SINGLE_INPUTS, SPEC_BY_ROLE, InputSpec
from wam_diff2_ros.ros.params.specs import DEFAULT_NODE_NAME
from wam_diff2_ros.ros.topics import OUTPUT_TOPICS as NODE_TOPICS
from wam_diff2_ros.ros.topics import absolute

if TYPE_CHECKING:
    from wam_diff2_ros.ros.input_rows import InputRow

NODE_PREFIX = f"/{DEFAULT_NODE_NAME}"
#: The node's outputs the replay writes, under the node's own topic names (detections_2d and answers are not
#: replayed).
OUTPUT_TOPICS = {
    name: absolute(NODE_TOPICS[name], NODE_PREFIX)
    for name in (
        "path",
        "path_fixed",
        "trajectory",
        "trajectory_fixed",
        "autoware_trajectory",
        "autoware_candidates",
        "markers",
        "detections",
        "debug_image",
    )
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

IMAGE = SPEC_BY_ROLE["image"]
CAMERA_INFO = SPEC_BY_ROLE["camera_info"]
COMPRESSED_TYPE = IMAGE.msg_types[1]
TF_TOPICS = ("/tf", "/tf_static")


NONE_WORDS = ("none", "off", "")


@dataclass
class TopicRequest:
    """Topics asked for by flags or the parameters file, by input role (absent = choose by type, ``"none"`` =
    off); a per-camera input's value is a list, one topic per camera."""

    topics: dict[str, str | list[str]] = field(default_factory=dict)

    def get(self, role: str) -> str | list[str] | None:
        """The request for ``role``, or None."""
        return self.topics.get(role)

    def merged(self, fallback: TopicRequest) -> TopicRequest:
        """The requests of ``self``, where unset those of ``fallback``."""
        return TopicRequest({**fallback.topics, **self.topics})


@dataclass
class TopicMap:
    """The bag topics feeding each input of the runtime (None = not used). A single input's topic reads as an
    attribute named after its role: ``topic_map.odometry``."""

    images: list[tuple[str, str]]  # (topic, transport raw|compressed), camera order
    camera_infos: list[str | None]
    singles: dict[str, str | None]  # role → topic, for every input of the table that is not per camera
    notes: list[str] = field(default_factory=list)

    def __getattr__(self, role: str) -> str | None:
        singles = self.__dict__.get("singles")
        if singles is None or role not in singles:
            raise AttributeError(role)
        return singles[role]

    def inputs(self) -> list[str]:
        """Every topic read as an input."""
        topics = [t for t, _ in self.images] + [t for t in self.camera_infos if t]
        return topics + [t for t in self.singles.values() if t]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description (for metrics.json)."""
        return {
            "images": [{"topic": t, "transport": k} for t, k in self.images],
            "camera_infos": list(self.camera_infos),
            **self.singles,
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


def _has_alternative(spec: InputSpec) -> bool:
    """Another input of the table is the same input under another type (command and driving_command)."""
    return any(other.input_name == spec.input_name and other is not spec for other in SINGLE_INPUTS)


def _single(topics: Mapping[str, Any], spec: InputSpec, requested: str | None, notes: list[str]) -> str | None:
    """The bag topic of a single input: as requested, else the only topic of its type (or of several, the only
    one whose name holds one of ``spec.prefer_words``), else None."""
    what, flag, types = spec.label, spec.flag, spec.msg_types
    if _is_off(requested):
        notes.append(f"{what}: off ({flag} none)")
        return None
    if requested is not None:
        _check_topic(topics, requested, flag, types)
        return requested
    candidates = _by_type(topics, *types)
    if spec.words_only:  # a common type (nav_msgs/Path): only a topic named for the input
        candidates = [c for c in candidates if any(word in c.lower() for word in spec.prefer_words)]
    if not candidates:
        if not _has_alternative(spec):  # alternatives are reported together (select_topics)
            notes.append(f"{what}: the bag has no {' / '.join(types)} topic")
        return None
    preferred = [c for c in candidates if any(word in c.lower() for word in spec.prefer_words)]
    if len(candidates) > 1 and len(preferred) == 1:
        notes.append(f"{what}: {preferred[0]} (of {len(candidates)} {types[0]} topics, by its name)")
        return preferred[0]
    if len(candidates) > 1:
        raise ReplayUsageError(
            f"more than one {what} topic: {_listing(topics, candidates)}; choose one with {flag} TOPIC"
            + (f" (or {flag} none)" if spec.optional else "")
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
    image_types = IMAGE.msg_types
    requested_images = request.get(IMAGE.role)
    requested_infos = request.get(CAMERA_INFO.role)
    if requested_images:
        image_topics = list(requested_images)
        for topic in image_topics:
            _check_topic(topics, topic, IMAGE.flag, image_types)
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
            f"camera(s) (cameras.names); for several cameras set cameras.names (and planning.cameras, or a "
            "prompt.template with one <image> per planning camera) with --set or --params, and give one "
            "--image-topic per camera in cameras.names order"
        )
    images = [(t, "compressed" if topics[t].msgtype == COMPRESSED_TYPE else "raw") for t in image_topics]

    all_infos = _by_type(topics, *CAMERA_INFO.msg_types)
    infos: list[str | None]
    if requested_infos:
        if len(requested_infos) != len(image_topics):
            raise ReplayUsageError(
                f"--camera-info-topic given {len(requested_infos)} time(s) for {len(image_topics)} "
                "camera(s); give one per camera (none for a camera without one)"
            )
        infos = []
        for topic in requested_infos:
            if _is_off(topic):
                infos.append(None)
            else:
                _check_topic(topics, topic, CAMERA_INFO.flag, CAMERA_INFO.msg_types)
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

    singles: dict[str, str | None] = {}
    for spec in SINGLE_INPUTS:
        requested = request.get(spec.role)
        singles[spec.role] = _single(topics, spec, requested if isinstance(requested, str) else None, notes)
    for name in dict.fromkeys(spec.input_name for spec in SINGLE_INPUTS if _has_alternative(spec)):
        if all(singles[spec.role] is None for spec in SINGLE_INPUTS if spec.input_name == name):
            notes.append(f"{name}: none; plans need one (or a fallback: --set {name}.default=...)")
    return TopicMap(images, infos, singles, notes)


def routes(topic_map: TopicMap, rows: Sequence[InputRow]) -> dict[str, InputRow]:
    """Bag topic → the row of the node's input table (:func:`wam_diff2_ros.ros.input_rows.input_table`) it feeds,
    as the node's subscription of that input would; a topic whose input the table lacks is not fed."""
    by_input = {(row.role, row.index): row for row in rows}
    wanted: dict[str, tuple[str, int | None]] = {}
    for index, (topic, _) in enumerate(topic_map.images):
        wanted.setdefault(topic, ("image", index))
    for index, info in enumerate(topic_map.camera_infos):
        if info:
            wanted.setdefault(info, ("camera_info", index))
    for role, topic in topic_map.singles.items():
        if topic:
            wanted.setdefault(topic, (role, None))
    return {topic: by_input[key] for topic, key in wanted.items() if key in by_input}
