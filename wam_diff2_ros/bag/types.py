"""Bag message and topic records, errors, message classes by type name, .msg definitions and QoS for bags.

Definitions of standard types come from the ``rosbags`` typestore (Kilted); other types are registered from
their ``.msg`` files with :func:`register_msg_dir`, or found automatically under
``<prefix>/share/<package>/msg`` (and, for this package, the source tree's ``msg/``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from rosbags.interfaces import (
    Nodetype,
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.typesys import Stores, TypesysError, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

PACKAGE = "wam_diff2_ros"
# The source tree's msg/ folder (an editable install or a checkout).
_SOURCE_MSG_DIR = Path(__file__).resolve().parents[3] / "msg"


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
