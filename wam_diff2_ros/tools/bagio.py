"""Read and write rosbag2 bags (MCAP; sqlite3 for reading) as real rclpy message objects.

Reading: :class:`BagReader` opens a bag folder (``metadata.yaml`` + storage files), a single
``.mcap``/``.db3`` file, the ``metadata.yaml`` itself, or a folder holding ``.mcap`` files but no
``metadata.yaml`` (a recording that died before writing it). :meth:`BagReader.messages` yields
``(topic, msgtype, stamp_ns, msg)`` in receive-time order with ``msg`` deserialised by
``rclpy.serialization.deserialize_message`` into the class named by the type
(``sensor_msgs/msg/Image`` -> ``sensor_msgs.msg.Image``). Messages of types that cannot be
imported are skipped and counted (one :class:`BagWarning` per type).

Damaged bags: an MCAP file that ``rosbags`` cannot open (cut short while recording, overwritten
tail, bad index) is scanned record by record instead; everything that decodes is yielded, and
then a :class:`BagReadError` names the file, the byte offset reached and how many messages came
through. Corrupt single messages are skipped and reported the same way, at the end.

Writing: :class:`BagWriter` writes a rosbag2 MCAP folder (``metadata.yaml`` with QoS profiles and
type hashes, MCAP with ``ros2msg`` schemas) that ``ros2 bag play`` accepts. Definitions of
standard types come from the ``rosbags`` typestore (Kilted); other types are registered from
their ``.msg`` files with :func:`register_msg_dir`, or found automatically under
``<prefix>/share/<package>/msg`` (and, for this package, the source tree's ``msg/``).
"""

from __future__ import annotations

import heapq
import importlib
import os
import shutil
import struct
import sys
import warnings
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from rclpy.serialization import deserialize_message, serialize_message
from rosbags.interfaces import (
    Nodetype,
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import Reader as _RosbagsReader
from rosbags.rosbag2 import Writer as _RosbagsWriter
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode, StoragePlugin
from rosbags.typesys import Stores, TypesysError, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

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
    "register_msg_dir",
    "stamp_to_ns",
]

PACKAGE = "wam_diff2_ros"
# The source tree's msg/ folder (an editable install or a checkout).
_SOURCE_MSG_DIR = Path(__file__).resolve().parents[2] / "msg"
_MCAP_MAGIC = b"\x89MCAP0\r\n"


class BagError(Exception):
    """Base class of the errors raised by this module."""


class BagReadError(BagError):
    """A bag could not be opened or read completely."""


class BagNotFoundError(BagReadError, FileNotFoundError):
    """The bag path does not exist."""


class BagWriteError(BagError):
    """A bag could not be written as asked."""


class MessageDefinitionError(BagError, ValueError):
    """A message definition (``.msg``) is missing, unparsable or conflicts with a known one."""


class BagWarning(UserWarning):
    """Something in a bag was skipped (unknown type, undecodable message)."""


class BagMessage(NamedTuple):
    """One message read from a bag; ``stamp_ns`` is the bag's receive time."""

    topic: str
    msgtype: str
    stamp_ns: int
    msg: Any


@dataclass(frozen=True)
class TopicInfo:
    """A topic of a bag: its type, message count and the QoS profiles offered when recorded."""

    name: str
    msgtype: str
    count: int
    qos: tuple[Qos, ...] = ()


# --------------------------------------------------------------------------------------------
# Message types


def _normalize_msgtype(msgtype: str) -> str:
    """``pkg/Name`` or ``pkg/msg/Name`` -> ``pkg/msg/Name``."""
    parts = msgtype.strip().split("/")
    if len(parts) == 2 and all(parts):
        return f"{parts[0]}/msg/{parts[1]}"
    if len(parts) == 3 and all(parts):
        return msgtype.strip()
    raise ValueError(f"not a ROS 2 message type name: {msgtype!r} (expected 'pkg/msg/Name')")


@cache
def message_class(msgtype: str) -> type | None:
    """The rclpy message class for ``pkg/msg/Name`` (imported from ``pkg.msg``), or None."""
    try:
        pkg, sub, name = _normalize_msgtype(msgtype).split("/")
        module = importlib.import_module(f"{pkg}.{sub}")
        cls = getattr(module, name)
    except (ImportError, AttributeError, ValueError):
        return None
    return cls if isinstance(cls, type) else None


def msgtype_of(msg_or_class: Any) -> str:
    """The ROS type name (``pkg/msg/Name``) of an rclpy message object or class."""
    cls = msg_or_class if isinstance(msg_or_class, type) else type(msg_or_class)
    module = getattr(cls, "__module__", "")
    parts = module.split(".")
    # Generated classes live in ``<pkg>.msg._<snake_name>``.
    if len(parts) < 2 or not hasattr(cls, "get_fields_and_field_types"):
        raise TypeError(f"{cls.__qualname__} is not a generated ROS 2 message class")
    pkg_parts = parts[: parts.index("msg")] if "msg" in parts else parts[:-1]
    return f"{'.'.join(pkg_parts)}/msg/{cls.__name__}"


def stamp_to_ns(stamp: Any) -> int:
    """``builtin_interfaces/Time`` (or anything with ``sec``/``nanosec``) -> integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


# --------------------------------------------------------------------------------------------
# Message definitions (for writing)

_DEFAULT_TYPESTORE: Typestore | None = None


def default_typestore() -> Typestore:
    """The module-wide typestore (ROS 2 Kilted standard types plus everything registered)."""
    global _DEFAULT_TYPESTORE  # one shared registry per process
    if _DEFAULT_TYPESTORE is None:
        _DEFAULT_TYPESTORE = get_typestore(Stores.ROS2_KILTED)
    return _DEFAULT_TYPESTORE


def register_msg_dir(msg_dir: str | Path, package: str, typestore: Typestore | None = None) -> list[str]:
    """Register every ``*.msg`` in ``msg_dir`` (or in ``msg_dir/msg``) as ``package/msg/<Stem>``.

    Returns the registered type names. Registering the same definitions again is a no-op; a
    different definition for a known type raises :class:`MessageDefinitionError`.
    """
    store = typestore if typestore is not None else default_typestore()
    folder = Path(msg_dir)
    if not folder.is_dir():
        raise MessageDefinitionError(f"message folder {str(folder)!r} does not exist")
    files = sorted(folder.glob("*.msg"))
    if not files and (folder / "msg").is_dir():
        files = sorted((folder / "msg").glob("*.msg"))
    if not files:
        raise MessageDefinitionError(f"no .msg files in {str(folder)!r}")
    types: dict[str, Any] = {}
    for path in files:
        name = f"{package}/msg/{path.stem}"
        try:
            types.update(get_types_from_msg(path.read_text(encoding="utf-8"), name))
        except (TypesysError, ValueError, UnicodeDecodeError) as exc:
            raise MessageDefinitionError(f"cannot parse {path}: {exc}") from exc
    for name, (_, fields) in types.items():
        for field_name, used in _used_types(fields):
            if used not in types and used not in store.fielddefs:
                raise MessageDefinitionError(
                    f"{name}: field {field_name!r} uses {used!r}, which is neither in {folder} nor known"
                )
    try:
        store.register(types)
    except TypesysError as exc:
        raise MessageDefinitionError(f"cannot register {folder}: {exc}") from exc
    return sorted(types)


def _used_types(fields: Iterable[Any]) -> Iterator[tuple[str, str]]:
    """``(field name, message type)`` for every field of a parsed definition that is a message."""
    for field_name, (node, detail) in fields:
        inner = detail[0] if node in (Nodetype.ARRAY, Nodetype.SEQUENCE) else (node, detail)
        if inner[0] == Nodetype.NAME:
            yield field_name, inner[1]


def _candidate_msg_dirs(package: str) -> list[Path]:
    prefixes = [os.environ.get("WAM_DIFF2_ROS_INTERFACES_PREFIX", ""), sys.prefix]
    prefixes += os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)
    dirs = [Path(p, "share", package, "msg") for p in prefixes if p]
    if package == PACKAGE:
        dirs.insert(0, _SOURCE_MSG_DIR)
    return dirs


def _ensure_type(store: Typestore, msgtype: str, seen: set[str] | None = None) -> None:
    """Make sure ``msgtype`` and every type it uses have definitions in ``store``."""
    seen = set() if seen is None else seen
    if msgtype in seen:
        return
    seen.add(msgtype)
    if msgtype not in store.fielddefs:
        package, _, name = msgtype.split("/")
        for folder in _candidate_msg_dirs(package):
            if (folder / f"{name}.msg").is_file():
                register_msg_dir(folder, package, store)
                break
        else:
            raise MessageDefinitionError(
                f"no message definition for {msgtype!r}: call register_msg_dir(<folder with "
                f"{name}.msg>, {package!r}) first (searched {[str(d) for d in _candidate_msg_dirs(package)]})"
            )
    for _, used in _used_types(store.fielddefs[msgtype][1]):
        _ensure_type(store, used, seen)


# --------------------------------------------------------------------------------------------
# QoS


def _qos(
    reliability: QosReliability,
    durability: QosDurability,
    depth: int,
    history: QosHistory = QosHistory.KEEP_LAST,
) -> Qos:
    zero = QosTime(0, 0)
    return Qos(history, depth, reliability, durability, zero, zero, QosLiveliness.AUTOMATIC, zero, False)


QOS_PRESETS: dict[str, Qos] = {
    # rclpy's default profile; a reliable publisher matches reliable and best-effort subscribers.
    "reliable": _qos(QosReliability.RELIABLE, QosDurability.VOLATILE, 10),
    "sensor_data": _qos(QosReliability.BEST_EFFORT, QosDurability.VOLATILE, 5),
    "latched": _qos(QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL, 1),
}


def _to_bag_qos(qos: Any) -> list[Qos]:
    """None / preset name / rosbags ``Qos`` / rclpy ``QoSProfile`` -> offered QoS profiles."""
    if qos is None:
        return [QOS_PRESETS["reliable"]]
    if isinstance(qos, str):
        try:
            return [QOS_PRESETS[qos]]
        except KeyError:
            raise BagWriteError(f"unknown QoS preset {qos!r}; choose from {sorted(QOS_PRESETS)}") from None
    if isinstance(qos, Qos):
        return [qos]
    try:  # rclpy.qos.QoSProfile (same numbering as rmw and rosbag2)

        def time_of(duration: Any) -> QosTime:
            ns = int(duration.nanoseconds)
            return QosTime(ns // 1_000_000_000, ns % 1_000_000_000)

        return [
            Qos(
                QosHistory(int(qos.history)),
                int(qos.depth),
                QosReliability(int(qos.reliability)),
                QosDurability(int(qos.durability)),
                time_of(qos.deadline),
                time_of(qos.lifespan),
                QosLiveliness(int(qos.liveliness)),
                time_of(qos.liveliness_lease_duration),
                bool(qos.avoid_ros_namespace_conventions),
            )
        ]
    except (AttributeError, TypeError, ValueError) as exc:
        raise BagWriteError(f"cannot use {qos!r} as a QoS profile: {exc}") from exc


# --------------------------------------------------------------------------------------------
# Writing


class BagWriter:
    """Write a rosbag2 MCAP folder; a context manager that closes the bag even on exceptions.

    ``BagWriter(path)`` creates ``path/`` with ``path.mcap`` and, on :meth:`close`,
    ``metadata.yaml``. ``compress=True`` zstd-compresses the MCAP chunks (``ros2 bag play``
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
        """Finish the MCAP (index, summary) and write ``metadata.yaml``; idempotent."""
        if not self.closed:
            self.closed = True
            self._writer.close()

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


# --------------------------------------------------------------------------------------------
# Reading: recovery scanner for MCAP files rosbags cannot open


@dataclass
class _Chunk:
    offset: int  # file offset of the chunk's records field
    length: int  # bytes of the records field present in the file
    declared: int  # bytes of the records field according to the record
    compression: str
    uncompressed_size: int
    crc: int
    start_ns: int


@dataclass
class _McapScan:
    """A forward scan of an MCAP file's data section that stops cleanly where the file is damaged."""

    path: Path
    size: int = 0
    schemas: dict[int, str] = field(default_factory=dict)
    channels: dict[int, tuple[str, str, bytes]] = field(default_factory=dict)  # id -> topic, type, meta
    chunks: list[_Chunk] = field(default_factory=list)
    loose: list[tuple[int, int, int, int]] = field(default_factory=list)  # stamp, channel, offset, len
    counts: Counter[int] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    reached: int = 0  # first byte that could not be used

    def __post_init__(self) -> None:
        self.size = self.path.stat().st_size
        with self.path.open("rb") as bio:
            if bio.read(8) != _MCAP_MAGIC:
                raise BagReadError(f"{self.path}: not an MCAP file (bad magic)")
            self._scan(bio)

    def _problem(self, offset: int, text: str) -> None:
        self.problems.append(f"{text} at byte {offset} of {self.size}")

    def _scan(self, bio: Any) -> None:
        pos = 8
        while True:
            head = bio.read(9)
            if len(head) == 0:
                self.reached = pos
                self._problem(pos, "file ends without MCAP footer (truncated)")
                return
            if len(head) < 9:
                self.reached = pos
                self._problem(pos, "truncated record header")
                return
            opcode, length = head[0], struct.unpack_from("<Q", head, 1)[0]
            body_at = pos + 9
            available = max(0, min(length, self.size - body_at))
            if opcode == 0x06:
                self._scan_chunk(bio, body_at, length, available)
                if available < length:
                    self.reached = body_at + available
                    return
            elif available < length:
                self.reached = body_at + available
                self._problem(pos, f"truncated record (opcode 0x{opcode:02x}, {length} bytes declared)")
                return
            elif opcode in (0x02, 0x0F):  # footer / data end: the data section is complete
                self.reached = self.size
                return
            elif opcode in (0x03, 0x04):
                self._meta_record(opcode, bio.read(length), pos)
            elif opcode == 0x05:
                rec = bio.read(min(length, 22))
                if len(rec) == 22 and length >= 22:
                    channel, stamp = struct.unpack_from("<H", rec)[0], struct.unpack_from("<Q", rec, 6)[0]
                    self.loose.append((stamp, channel, body_at + 22, length - 22))
                    self.counts[channel] += 1
                else:
                    self._problem(pos, "message record too short")
            pos = body_at + length
            bio.seek(pos)

    def _meta_record(self, opcode: int, rec: bytes, at: int) -> None:
        try:
            if opcode == 0x03:
                schema_id = struct.unpack_from("<H", rec)[0]
                name, _ = _mcap_string(rec, 2)
                self.schemas[schema_id] = name
            else:
                channel_id, schema_id = struct.unpack_from("<HH", rec)
                topic, off = _mcap_string(rec, 4)
                _, off = _mcap_string(rec, off)
                (meta_len,) = struct.unpack_from("<I", rec, off)
                meta = rec[off + 4 : off + 4 + meta_len]
                self.channels[channel_id] = (topic, self.schemas.get(schema_id, ""), meta)
        except (struct.error, UnicodeDecodeError, ValueError):
            self._problem(at, "malformed schema/channel record")

    def _scan_chunk(self, bio: Any, body_at: int, length: int, available: int) -> None:
        head = bio.read(min(available, 32))
        if len(head) < 32:
            self._problem(body_at - 9, "truncated chunk header")
            return
        start_ns, _, usize, crc, clen = struct.unpack_from("<QQQII", head)
        comp = bio.read(min(clen, max(0, available - 32))).decode("ascii", "replace")
        rec_len_raw = bio.read(8)
        if len(comp) < clen or len(rec_len_raw) < 8:
            self._problem(body_at - 9, "truncated chunk header")
            return
        declared = struct.unpack("<Q", rec_len_raw)[0]
        offset = body_at + 32 + clen + 8
        present = max(0, min(declared, self.size - offset))
        chunk = _Chunk(offset, present, declared, comp, usize, crc, start_ns)
        if present < declared:
            self._problem(body_at - 9, f"chunk cut short ({present} of {declared} bytes present)")
        data = self._chunk_records(bio, chunk, body_at - 9)
        if data is None:
            return
        self.chunks.append(chunk)
        for opcode, start, end in _iter_records(data):
            if opcode in (0x03, 0x04):
                self._meta_record(opcode, data[start:end], body_at - 9)
            elif opcode == 0x05 and end - start >= 22:
                self.counts[struct.unpack_from("<H", data, start)[0]] += 1

    def _chunk_records(self, bio: Any, chunk: _Chunk, at: int, report: bool = True) -> bytes | None:
        """The (possibly partial) uncompressed records of ``chunk``; None if nothing is usable."""
        bio.seek(chunk.offset)
        raw = bio.read(chunk.length)
        complete = chunk.length == chunk.declared
        try:
            if chunk.compression == "":
                data = raw
            elif chunk.compression == "zstd":
                from backports import zstd  # rosbags' own dependency

                data = zstd.ZstdDecompressor().decompress(raw)
            elif chunk.compression == "lz4":
                import lz4.frame

                decompressor = lz4.frame.LZ4FrameDecompressor()
                data = decompressor.decompress(raw)
            else:
                if report:
                    self._problem(at, f"unsupported chunk compression {chunk.compression!r}")
                return None
        except Exception as exc:
            if report:
                self._problem(at, f"chunk does not decompress ({exc})")
            return None
        if complete and len(data) != chunk.uncompressed_size:
            if report:
                self._problem(at, "chunk size mismatch")
            return None
        if complete and chunk.crc and zlib.crc32(data) != chunk.crc:
            if report:
                self._problem(at, "chunk checksum mismatch")
            return None
        return data

    def messages(self, wanted: set[int]) -> Iterator[tuple[int, int, bytes]]:
        """``(stamp_ns, channel_id, payload)`` for the channels in ``wanted``, in time order."""
        with self.path.open("rb") as bio:
            sources: list[Iterator[tuple[int, int, int, bytes]]] = [
                self._chunk_messages(bio, chunk, wanted, i) for i, chunk in enumerate(self.chunks)
            ]
            loose = sorted(x for x in self.loose if x[1] in wanted)
            sources.append(self._loose_messages(bio, loose))
            for stamp, order, channel, payload in heapq.merge(*sources):
                if order >= 0:
                    yield stamp, channel, payload

    def _chunk_messages(
        self, bio: Any, chunk: _Chunk, wanted: set[int], index: int
    ) -> Iterator[tuple[int, int, int, bytes]]:
        # A placeholder at the chunk's start time keeps the merge from decoding every chunk up front.
        yield (chunk.start_ns, -1, 0, b"")
        data = self._chunk_records(bio, chunk, 0, report=False)
        if data is None:
            return
        found = []
        for opcode, start, end in _iter_records(data):
            if opcode == 0x05 and end - start >= 22:
                channel = struct.unpack_from("<H", data, start)[0]
                if channel in wanted:
                    stamp = struct.unpack_from("<Q", data, start + 6)[0]
                    found.append((stamp, index, channel, bytes(data[start + 22 : end])))
        found.sort(key=lambda item: item[0])
        yield from found

    def _loose_messages(
        self, bio: Any, loose: list[tuple[int, int, int, int]]
    ) -> Iterator[tuple[int, int, int, bytes]]:
        for stamp, channel, offset, length in loose:
            bio.seek(offset)
            yield (stamp, len(self.chunks), channel, bio.read(length))


def _mcap_string(buf: bytes, offset: int) -> tuple[str, int]:
    (size,) = struct.unpack_from("<I", buf, offset)
    end = offset + 4 + size
    if end > len(buf):
        raise ValueError("string runs past the record")
    return buf[offset + 4 : end].decode("utf-8"), end


def _iter_records(data: bytes) -> Iterator[tuple[int, int, int]]:
    """``(opcode, body_start, body_end)`` of each complete record in ``data``."""
    pos, size = 0, len(data)
    while pos + 9 <= size:
        opcode, length = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        start = pos + 9
        if start + length > size:
            return
        yield opcode, start, start + length
        pos = start + length


# --------------------------------------------------------------------------------------------
# Reading


class _Part:
    """One readable unit of a bag: a rosbags reader (folder or file) or a recovery scan."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None
        self.scan: _McapScan | None = None
        self.reader: _RosbagsReader | None = None
        try:
            reader = _RosbagsReader(path)
            reader.open()
            self.reader = reader
        except FileNotFoundError as exc:
            raise BagNotFoundError(f"{path}: {exc}") from exc
        except Exception as exc:
            self.problem = str(exc)
            if path.suffix != ".mcap":
                raise BagReadError(f"cannot open {path}: {exc}") from exc
            self.scan = _McapScan(path)

    def topics(self) -> list[TopicInfo]:
        if self.reader is not None:
            return [
                TopicInfo(c.topic, c.msgtype, c.msgcount, tuple(getattr(c.ext, "offered_qos_profiles", ())))
                for c in self.reader.connections
            ]
        assert self.scan is not None
        from rosbags.rosbag2.storage_mcap import get_qos

        infos = []
        for cid, (topic, msgtype, meta) in sorted(self.scan.channels.items()):
            try:
                qos = tuple(get_qos(meta))
            except Exception:
                qos = ()
            infos.append(TopicInfo(topic, msgtype, self.scan.counts.get(cid, 0), qos))
        return infos

    def raw(self, topics: set[str] | None, errors: list[str]) -> Iterator[tuple[int, str, str, bytes]]:
        """``(stamp_ns, topic, msgtype, payload)`` in time order; problems go to ``errors``."""
        if self.reader is not None:
            conns = [c for c in self.reader.connections if topics is None or c.topic in topics]
            if not conns:
                return
            try:
                for conn, stamp, data in self.reader.messages(connections=conns):
                    yield stamp, conn.topic, conn.msgtype, data
            except Exception as exc:  # corrupt data behind an intact index
                errors.append(f"{self.path}: read failed: {exc}")
            return
        assert self.scan is not None
        wanted = {cid for cid, (topic, _, _) in self.scan.channels.items() if topics is None or topic in topics}
        for stamp, channel, payload in self.scan.messages(wanted):
            topic, msgtype, _ = self.scan.channels[channel]
            yield stamp, topic, msgtype, payload
        where = "; ".join(self.scan.problems) or f"unreadable after byte {self.scan.reached}"
        errors.append(f"{self.path}: {where} (opening normally failed: {self.problem})")

    def close(self) -> None:
        if self.reader is not None and self.reader.is_open:
            self.reader.close()


class BagReader:
    """Read a rosbag2 bag (folder, ``metadata.yaml``, ``.mcap`` or ``.db3``) as rclpy messages.

    Attributes after construction: ``path``, ``topics`` (name -> :class:`TopicInfo`),
    ``message_count``, ``damaged`` (description of damage found while opening, or None),
    ``skipped`` (``(topic, msgtype)`` -> messages skipped for an unimportable type) and
    ``decode_errors`` (messages whose payload did not deserialise).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise BagNotFoundError(f"bag {str(self.path)!r} does not exist")
        self._parts = [_Part(p) for p in self._storage_paths()]
        self.skipped: Counter[tuple[str, str]] = Counter()
        self.decode_errors = 0
        topics: dict[str, TopicInfo] = {}
        for part in self._parts:
            for info in part.topics():
                if info.name in topics:
                    have = topics[info.name]
                    info = TopicInfo(info.name, have.msgtype, have.count + info.count, have.qos or info.qos)
                topics[info.name] = info
        self.topics: dict[str, TopicInfo] = dict(sorted(topics.items()))
        problems = [f"{p.path}: {'; '.join(p.scan.problems)}" for p in self._parts if p.scan and p.scan.problems]
        self.damaged: str | None = " | ".join(problems) if problems else None

    def _storage_paths(self) -> list[Path]:
        path = self.path
        if path.is_file():
            if path.name == "metadata.yaml":
                return self._folder_paths(path.parent)
            if path.suffix in (".mcap", ".db3"):
                return [path]
            raise BagReadError(f"{path} is not a bag: expected a rosbag2 folder, metadata.yaml, .mcap or .db3")
        return self._folder_paths(path)

    def _folder_paths(self, folder: Path) -> list[Path]:
        if (folder / "metadata.yaml").is_file():
            try:  # the normal case: rosbags reads the whole folder
                reader = _RosbagsReader(folder)
                reader.open()
                reader.close()
                return [folder]
            except Exception as exc:
                files = self._files_from_metadata(folder)
                if not files:
                    raise BagReadError(f"cannot open bag folder {folder}: {exc}") from exc
                return files
        files = sorted(folder.glob("*.mcap")) or sorted(folder.glob("*.db3"))
        if not files:
            raise BagReadError(f"{folder} is not a rosbag2 folder: no metadata.yaml and no .mcap/.db3 files")
        return files

    @staticmethod
    def _files_from_metadata(folder: Path) -> list[Path]:
        from ruamel.yaml import YAML

        try:
            info = YAML(typ="safe").load((folder / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
            if info.get("compression_mode", "") not in ("", "none", None):
                return []
            names = [Path(p).name for p in info["relative_file_paths"]]
        except Exception:
            return []
        files = [folder / n for n in names if (folder / n).is_file()]
        return files if len(files) == len(names) else []

    @property
    def message_count(self) -> int:
        """Messages in the bag according to its index (or the recovery scan)."""
        return sum(info.count for info in self.topics.values())

    def messages(self, topics: Iterable[str] | None = None, *, missing_ok: bool = False) -> Iterator[BagMessage]:
        """Yield :class:`BagMessage` in receive-time order, optionally only for ``topics``.

        Unimportable types are skipped (counted in ``skipped``, one :class:`BagWarning` each).
        If the bag is damaged or messages do not deserialise, a :class:`BagReadError` follows
        the last message that could be read.
        """
        wanted = self._wanted(topics, missing_ok)
        errors: list[str] = []
        yielded, last_stamp = 0, None
        first_decode_error: str | None = None
        warned: set[str] = set()
        sources = [part.raw(wanted, errors) for part in self._parts]
        stream = sources[0] if len(sources) == 1 else heapq.merge(*sources, key=lambda item: item[0])
        for stamp, topic, msgtype, data in stream:
            cls = message_class(msgtype)
            if cls is None:
                self.skipped[(topic, msgtype)] += 1
                if msgtype not in warned:
                    warned.add(msgtype)
                    warnings.warn(
                        f"{self.path}: skipping messages of type {msgtype} on {topic}: "
                        f"cannot import {msgtype.replace('/', '.')}",
                        BagWarning,
                        stacklevel=2,
                    )
                continue
            try:
                msg = deserialize_message(data, cls)
            except Exception as exc:
                self.decode_errors += 1
                first_decode_error = first_decode_error or f"{topic} at {stamp} ns: {exc}"
                continue
            yielded += 1
            last_stamp = stamp
            yield BagMessage(topic, msgtype, stamp, msg)
        if first_decode_error:
            errors.append(f"{self.decode_errors} message(s) did not deserialise (first: {first_decode_error})")
        if errors:
            got = f"{yielded} message(s) read" + (f", last stamp {last_stamp} ns" if last_stamp is not None else "")
            raise BagReadError(f"bag {self.path} is damaged: {' | '.join(errors)}; {got}")

    def raw_messages(self, topics: Iterable[str] | None = None) -> Iterator[tuple[str, str, int, bytes]]:
        """Yield ``(topic, msgtype, stamp_ns, cdr_bytes)`` without deserialising (any type)."""
        wanted = self._wanted(topics, missing_ok=False)
        errors: list[str] = []
        sources = [part.raw(wanted, errors) for part in self._parts]
        stream = sources[0] if len(sources) == 1 else heapq.merge(*sources, key=lambda item: item[0])
        for stamp, topic, msgtype, data in stream:
            yield topic, msgtype, stamp, data
        if errors:
            raise BagReadError(f"bag {self.path} is damaged: {' | '.join(errors)}")

    def _wanted(self, topics: Iterable[str] | None, missing_ok: bool) -> set[str] | None:
        if topics is None:
            return None
        wanted = {topics} if isinstance(topics, str) else set(topics)
        unknown = wanted - self.topics.keys()
        if unknown and not missing_ok:
            raise BagReadError(f"topics {sorted(unknown)} are not in {self.path}; it has {sorted(self.topics)}")
        return wanted

    def close(self) -> None:
        """Release the storage files."""
        for part in self._parts:
            part.close()

    def __enter__(self) -> BagReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
