"""Read a rosbag2 bag (folder, ``metadata.yaml``, ``.mcap`` or ``.db3``) as real rclpy message objects.

:meth:`BagReader.messages` yields ``(topic, msgtype, stamp_ns, msg)`` in receive-time order with ``msg``
deserialised by ``rclpy.serialization.deserialize_message``. Messages of types that cannot be imported are
skipped and counted (one :class:`BagWarning` per type). A damaged MCAP file (cut short, its summary damaged, or
a chunk failing its CRC) is read by :mod:`wam_diff2_ros.bag.salvage`: a damaged chunk is skipped and the reading
goes on with the next one; everything that decodes is yielded, then a :class:`BagReadError` names the file, the
skipped chunks' time ranges, the byte offset reached and how many messages came through.
"""

from __future__ import annotations

import heapq
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from rclpy.serialization import deserialize_message
from rosbags.rosbag2 import Reader as _RosbagsReader

from wam_diff2_ros.bag.checksums import ChunkDamage, damaged_chunks
from wam_diff2_ros.bag.salvage import McapScan, summary_problem
from wam_diff2_ros.bag.types import BagMessage, BagNotFoundError, BagReadError, BagWarning, TopicInfo, message_class


class _Part:
    """One readable unit of a bag: a rosbags reader (folder or file) or a recovery scan."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None
        self.scan: McapScan | None = None
        self.reader: _RosbagsReader | None = None
        try:
            reader = _RosbagsReader(path)
            reader.open()
            damage = _mcap_damage(path) if path.suffix == ".mcap" else None
            if damage:  # rosbags would read through a wrong index, or stop at the first damaged chunk
                reader.close()
                raise BagReadError(damage)
            self.reader = reader
        except FileNotFoundError as exc:
            raise BagNotFoundError(f"{path}: {exc}") from exc
        except Exception as exc:
            self.problem = str(exc)
            if path.suffix != ".mcap":
                raise BagReadError(f"cannot open {path}: {exc}") from exc
            self.scan = McapScan(path)
            if self.scan.skipped:  # the scan describes the damaged chunks itself, with their message counts
                self.problem = None
            if not self.scan.problems:  # the data section is whole: what failed is the summary
                self.scan.problems.append(f"damaged summary ({exc}); the messages are read from the chunks")

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
        if self.problem and self.problem not in where:
            where += f" (opening normally failed: {self.problem})"
        errors.append(f"{self.path}: {where}")

    def close(self) -> None:
        if self.reader is not None and self.reader.is_open:
            self.reader.close()


def _mcap_damage(path: Path) -> str | None:
    """Why the MCAP file at ``path`` must be read by the recovery scan (a damaged summary, chunks that fail their
    CRC), or None."""
    problem = summary_problem(path)
    if problem:
        return problem
    chunks = damaged_chunks(path)
    return "; ".join(damage.describe() for damage in chunks) if chunks else None


class BagReader:
    """Read a rosbag2 bag (folder, ``metadata.yaml``, ``.mcap`` or ``.db3``) as rclpy messages.

    Attributes after construction: ``path``, ``topics`` (name -> :class:`TopicInfo`),
    ``message_count``, ``damaged`` (description of damage found while opening, or None),
    ``skipped`` (``(topic, msgtype)`` -> messages skipped for an unimportable type), ``skipped_chunks`` (the
    damaged chunks left out: :class:`~wam_diff2_ros.bag.checksums.ChunkDamage`, their time ranges) and
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
        self.skipped_chunks: list[ChunkDamage] = [d for p in self._parts if p.scan for d in p.scan.skipped]

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
            try:  # the normal case: rosbags reads the whole folder, unless a file's summary is damaged
                reader = _RosbagsReader(folder)
                reader.open()
                reader.close()
                files = self._files_from_metadata(folder)
                damaged = any(_mcap_damage(f) for f in files if f.suffix == ".mcap")
                return files if damaged else [folder]
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
            raise BagReadError(f"bag {self.path} is damaged: {self._skipped_text()}{' | '.join(errors)}; {got}")

    def _skipped_text(self) -> str:
        """``"N damaged chunk(s) skipped (M messages); "`` or nothing."""
        if not self.skipped_chunks:
            return ""
        counts = [d.messages for d in self.skipped_chunks]
        lost = f"{sum(c for c in counts if c)} message(s)" if None not in counts else "messages uncounted"
        return f"{len(self.skipped_chunks)} damaged chunk(s) skipped ({lost}); "

    def raw_messages(self, topics: Iterable[str] | None = None) -> Iterator[tuple[str, str, int, bytes]]:
        """Yield ``(topic, msgtype, stamp_ns, cdr_bytes)`` without deserialising (any type)."""
        wanted = self._wanted(topics, missing_ok=False)
        errors: list[str] = []
        sources = [part.raw(wanted, errors) for part in self._parts]
        stream = sources[0] if len(sources) == 1 else heapq.merge(*sources, key=lambda item: item[0])
        for stamp, topic, msgtype, data in stream:
            yield topic, msgtype, stamp, data
        if errors:
            raise BagReadError(f"bag {self.path} is damaged: {self._skipped_text()}{' | '.join(errors)}")

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
