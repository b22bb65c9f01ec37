"""Read and write rosbag2 bags (MCAP; sqlite3 for reading) as real rclpy message objects.

:mod:`~wam_diff2_ros.bag.types` (records, errors, message classes, ``.msg`` definitions, QoS),
:mod:`~wam_diff2_ros.bag.reader`, :mod:`~wam_diff2_ros.bag.writer`, :mod:`~wam_diff2_ros.bag.salvage` (reading
damaged MCAP files), :mod:`~wam_diff2_ros.bag.play` (publishing a bag on DDS, ``wam-diff2-play``).
"""

from wam_diff2_ros.bag.reader import BagReader
from wam_diff2_ros.bag.types import (
    QOS_PRESETS,
    BagError,
    BagMessage,
    BagNotFoundError,
    BagReadError,
    BagWarning,
    BagWriteError,
    MessageDefinitionError,
    TopicInfo,
    default_typestore,
    message_class,
    msgtype_of,
    register_msg_dir,
)
from wam_diff2_ros.bag.writer import BagWriter
from wam_diff2_ros.ros.conversions import ns_to_stamp, stamp_to_ns  # header stamps: one home

__all__ = [
    "QOS_PRESETS",
    "BagError",
    "BagMessage",
    "BagNotFoundError",
    "BagReadError",
    "BagReader",
    "BagWarning",
    "BagWriteError",
    "BagWriter",
    "MessageDefinitionError",
    "TopicInfo",
    "default_typestore",
    "message_class",
    "msgtype_of",
    "ns_to_stamp",
    "register_msg_dir",
    "stamp_to_ns",
]
