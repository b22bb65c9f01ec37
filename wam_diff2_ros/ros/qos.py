"""QoS profiles of the node's subscriptions and publishers (design notes §5).

Inputs come from ``qos.<input>.*`` parameters (images: best-effort KEEP_LAST 1 by default, as the
sensor-data profile; a best-effort subscription also receives from reliable publishers). Outputs are
reliable KEEP_LAST 1, so the latest plan reaches every subscriber; the debug image is best-effort
(it is large and only for viewing).
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from .params import QosSettings

_RELIABILITY = {"best_effort": ReliabilityPolicy.BEST_EFFORT, "reliable": ReliabilityPolicy.RELIABLE}
_DURABILITY = {"volatile": DurabilityPolicy.VOLATILE, "transient_local": DurabilityPolicy.TRANSIENT_LOCAL}


def input_qos(settings: QosSettings) -> QoSProfile:
    """The subscription profile described by ``settings``."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=settings.depth,
        reliability=_RELIABILITY[settings.reliability],
        durability=_DURABILITY[settings.durability],
    )


def output_qos(depth: int = 1) -> QoSProfile:
    """Reliable, volatile, KEEP_LAST ``depth``: plans, trajectories, markers, detections, answers."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.VOLATILE,
    )


def debug_image_qos() -> QoSProfile:
    """Best-effort KEEP_LAST 1 (sensor data) for ``~/debug/image``."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=1,
        reliability=ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.VOLATILE,
    )


def question_qos() -> QoSProfile:
    """Reliable KEEP_LAST 10 for ``~/input/question`` (questions must not be lost)."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=10,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.VOLATILE,
    )


def publisher_qos(output: str) -> QoSProfile:
    """The QoS of the node's output ``output`` (:data:`~.topics.OUTPUT_TOPICS`): the debug image's, else the
    outputs'."""
    return debug_image_qos() if output == "debug_image" else output_qos()
