"""Write a rosbag2 MCAP folder (``metadata.yaml`` with QoS profiles and type hashes, MCAP with ``ros2msg``
schemas) that ``ros2 bag play`` accepts.
"""

from __future__ import annotations

import shutil
import warnings
from collections import Counter
from pathlib import Path
from types import TracebackType
from typing import Any

from rclpy.serialization import serialize_message
from rosbags.rosbag2 import Writer as _RosbagsWriter
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode, StoragePlugin
from rosbags.typesys.store import Typestore

from wam_diff2_ros.bag.checksums import write_checksums
from wam_diff2_ros.bag.types import (
    BagWarning,
    BagWriteError,
    _ensure_type,
    _normalize_msgtype,
    _to_bag_qos,
    default_typestore,
    message_class,
    msgtype_of,
)


class BagWriter:
    """Write a rosbag2 MCAP folder; a context manager that closes the bag even on exceptions.

        ``BagWriter(path)`` creates ``path/`` with ``path.mcap`` and, on :meth:`close`,
        ``metadata.yaml``. Chunks, the data section and the summary carry CRCs (rosbags writes 0, "not computed";
    :meth:`close` fills them in). ``compress=True`` zstd-compresses the MCAP chunks (``ros2 bag play``
        reads those too). ``custom_data`` lands in ``metadata.yaml``.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        typestore: Typestore | None = None,
        compress: bool = False,
        overwrite: bool = False,
        custom_data: dict[str, str] | None = None,
        version: int = 9,
    ) -> None:
        self.path = Path(path)
        self.typestore = typestore if typestore is not None else default_typestore()
        if self.path.exists():
            if not overwrite:
                raise BagWriteError(f"{self.path} exists already; pass overwrite=True to replace it")
            if self.path.is_dir() and any(self.path.iterdir()) and not _looks_like_bag_dir(self.path):
                raise BagWriteError(f"{self.path} exists and is not a bag folder; refusing to delete it")
            if self.path.is_dir():
                shutil.rmtree(self.path)
            else:
                raise BagWriteError(f"{self.path} exists and is a file, not a bag folder")
        if version not in (8, 9):
            raise BagWriteError(f"rosbag2 metadata version must be 8 or 9, not {version}")
        self._writer = _RosbagsWriter(self.path, version=version, storage_plugin=StoragePlugin.MCAP)
        if compress:
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        for key, value in (custom_data or {}).items():
            self._writer.set_custom_data(str(key), str(value))
        self._writer.open()
        self._topics: dict[str, tuple[str, Any, type | None]] = {}
        self.counts: Counter[str] = Counter()
        self.closed = False

    @property
    def storage_file(self) -> Path:
        """The ``.mcap`` file inside the bag folder."""
        return self.path / f"{self.path.name}.mcap"

    def add_topic(self, topic: str, msgtype: str | type, qos: Any = None) -> None:
        """Declare ``topic`` with type ``msgtype`` (name or rclpy class) and offered ``qos``.

        ``qos``: None (reliable, depth 10), a preset name from :data:`QOS_PRESETS`, an rclpy
        ``QoSProfile`` or a rosbags ``Qos``. Adding the same topic and type again is a no-op.
        """
        self._check_open()
        if not isinstance(topic, str) or not topic.startswith("/") or len(topic) < 2:
            raise BagWriteError(f"topic must be an absolute name like '/odom', not {topic!r}")
        name = msgtype_of(msgtype) if isinstance(msgtype, type) else _normalize_msgtype(msgtype)
        if topic in self._topics:
            if self._topics[topic][0] != name:
                raise BagWriteError(f"topic {topic} already added with type {self._topics[topic][0]}, not {name}")
            return
        _ensure_type(self.typestore, name)
        connection = self._writer.add_connection(
            topic, name, typestore=self.typestore, offered_qos_profiles=_to_bag_qos(qos)
        )
        self._topics[topic] = (name, connection, message_class(name))

    def write(self, topic: str, msg: Any, stamp_ns: int) -> None:
        """Write ``msg`` (an rclpy message of the topic's type, or CDR bytes) at ``stamp_ns``."""
        self._check_open()
        try:
            name, connection, cls = self._topics[topic]
        except KeyError:
            raise BagWriteError(f"topic {topic!r} was not added; call add_topic() first") from None
        if not isinstance(stamp_ns, int) or isinstance(stamp_ns, bool) or stamp_ns < 0:
            raise BagWriteError(f"stamp_ns must be a non-negative int (nanoseconds), not {stamp_ns!r}")
        if isinstance(msg, bytes | bytearray | memoryview):
            data = bytes(msg)
        else:
            if cls is not None and not isinstance(msg, cls):
                raise BagWriteError(f"topic {topic} has type {name}; got {type(msg).__qualname__}")
            try:
                data = serialize_message(msg)
            except Exception as exc:
                raise BagWriteError(f"cannot serialise {type(msg).__qualname__} for {topic}: {exc}") from exc
        self._writer.write(connection, stamp_ns, data)
        self.counts[topic] += 1

    def close(self) -> None:
        """Finish the MCAP (index, summary, the CRCs of every chunk, the data section and the summary) and write
        ``metadata.yaml``; idempotent."""
        if not self.closed:
            self.closed = True
            self._writer.close()
            write_checksums(self.storage_file)

    def _check_open(self) -> None:
        if self.closed:
            raise BagWriteError(f"bag {self.path} is closed")

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # keep what was written readable, but let the original exception through
            self.close()
        except Exception as close_exc:
            warnings.warn(f"could not close {self.path} cleanly: {close_exc}", BagWarning, stacklevel=2)


def _looks_like_bag_dir(path: Path) -> bool:
    return (path / "metadata.yaml").is_file() or any(path.glob("*.mcap")) or any(path.glob("*.db3"))
