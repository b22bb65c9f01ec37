"""Recovery scanner for MCAP files ``rosbags`` cannot open or whose summary is damaged (cut short while recording,
overwritten tail, bad index): :func:`summary_problem` checks the summary before it is trusted; :class:`McapScan`
is a forward scan of the data section that stops cleanly where the file is damaged.
"""

from __future__ import annotations

import heapq
import struct
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wam_diff2_ros.bag.checksums import MCAP_MAGIC, ChunkDamage, chunk_records
from wam_diff2_ros.bag.types import BagReadError

_FOOTER = 8 + 1 + 8 + 20  # the footer record (opcode, length, summary start, offset start, crc) and the magic
#: Records a summary section may hold: schema, channel, chunk index, attachment index, statistics, metadata
#: index, summary offset.
_SUMMARY_OPCODES = {0x03, 0x04, 0x08, 0x0A, 0x0B, 0x0D, 0x0E}


def summary_problem(path: Path) -> str | None:
    """What is wrong with the summary of the MCAP file at ``path`` (None: nothing found; also None for a file
    without a summary, which readers handle by scanning). Checked: the footer and its summary CRC, that every
    summary record lies inside the summary with a known opcode, that schemas and channels decode, that each chunk
    index matches the chunk it points to, and that the statistics count the schemas, channels and chunks found."""
    with path.open("rb") as bio:
        size = bio.seek(0, 2)
        if size < 8 + _FOOTER:
            return None
        bio.seek(size - _FOOTER)
        tail = bio.read(_FOOTER)
        if tail[-8:] != MCAP_MAGIC or tail[0] != 0x02:
            return None  # no footer: cut short, for the scan to say
        summary_start, offsets_start, crc = struct.unpack_from("<QQI", tail, 9)
        if summary_start == 0:
            return None  # written without a summary
        footer_at = size - _FOOTER
        if not 8 <= summary_start <= footer_at or not (
            offsets_start == 0 or summary_start <= offsets_start <= footer_at
        ):
            return f"the footer points outside the file (summary at byte {summary_start} of {size})"
        bio.seek(summary_start)
        summary = bio.read(footer_at - summary_start)
        if crc and zlib.crc32(tail[:25], zlib.crc32(summary)) != crc:
            return "summary checksum mismatch"
        try:
            return _check_summary(bio, summary, summary_start)
        except (struct.error, UnicodeDecodeError, ValueError) as exc:
            return f"malformed summary record ({exc})"


def _check_summary(bio: Any, summary: bytes, summary_start: int) -> str | None:
    found: Counter[int] = Counter()
    statistics: tuple[int, ...] | None = None
    schemas = {0}
    channels_schemas = []
    pos = 0
    while pos < len(summary):
        if pos + 9 > len(summary):
            return f"summary record header cut at byte {summary_start + pos}"
        opcode, length = summary[pos], struct.unpack_from("<Q", summary, pos + 1)[0]
        body = summary[pos + 9 : pos + 9 + length]
        if opcode not in _SUMMARY_OPCODES or len(body) < length:
            return f"summary record at byte {summary_start + pos} is not valid (opcode 0x{opcode:02x}, {length} bytes)"
        found[opcode] += 1
        if opcode == 0x03:
            schemas.add(struct.unpack_from("<H", body)[0])
            _mcap_string(body, 2)
        elif opcode == 0x04:
            channels_schemas.append(struct.unpack_from("<H", body, 2)[0])
            _mcap_string(body, _mcap_string(body, 4)[1])
        elif opcode == 0x08:
            problem = _check_chunk_index(bio, body, summary_start)
            if problem:
                return problem
        elif opcode == 0x0B:
            statistics = struct.unpack_from("<QHIIIII", body)
        pos += 9 + length
    if any(schema not in schemas for schema in channels_schemas):
        return "a summary channel names a schema the summary lacks"
    if statistics is not None:
        _, schema_count, channel_count, _, _, chunk_count, _ = statistics
        if (schema_count, channel_count, chunk_count) != (found[0x03], found[0x04], found[0x08]):
            return (
                f"summary statistics ({schema_count} schemas, {channel_count} channels, {chunk_count} chunks) do not "
                f"match its records ({found[0x03]}, {found[0x04]}, {found[0x08]})"
            )
    return None


def _check_chunk_index(bio: Any, body: bytes, summary_start: int) -> str | None:
    start_ns, end_ns, offset, length = struct.unpack_from("<QQQQ", body)
    if not 8 <= offset < offset + length <= summary_start or length < 9 + 40:
        return f"a chunk index points outside the data section (byte {offset}, {length} bytes)"
    bio.seek(offset)
    head = bio.read(9 + 16)
    if head[0] != 0x06 or struct.unpack_from("<QQQ", head, 1) != (length - 9, start_ns, end_ns):
        return f"a chunk index does not match the chunk at byte {offset}"
    return None


@dataclass
class _Chunk:
    offset: int  # file offset of the chunk's records field
    length: int  # bytes of the records field present in the file
    declared: int  # bytes of the records field according to the record
    compression: str
    uncompressed_size: int
    crc: int
    start_ns: int
    end_ns: int


@dataclass
class McapScan:
    """A forward scan of an MCAP file's data section that stops cleanly where the file is damaged."""

    path: Path
    size: int = 0
    schemas: dict[int, str] = field(default_factory=dict)
    channels: dict[int, tuple[str, str, bytes]] = field(default_factory=dict)  # id -> topic, type, meta
    chunks: list[_Chunk] = field(default_factory=list)
    loose: list[tuple[int, int, int, int]] = field(default_factory=list)  # stamp, channel, offset, len
    counts: Counter[int] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    skipped: list[ChunkDamage] = field(default_factory=list)  # damaged chunks left out, in file order
    reached: int = 0  # first byte that could not be used

    def __post_init__(self) -> None:
        self.size = self.path.stat().st_size
        with self.path.open("rb") as bio:
            if bio.read(8) != MCAP_MAGIC:
                raise BagReadError(f"{self.path}: not an MCAP file (bad magic)")
            self._scan(bio)
        self.problems[:0] = [damage.describe() for damage in self.skipped]

    def _problem(self, offset: int, text: str) -> None:
        self.problems.append(f"{text} at byte {offset} of {self.size}")

    def _scan(self, bio: Any) -> None:
        pos, last_chunk = 8, -1
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
                last_chunk = pos
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
            elif opcode == 0x07 and self.skipped and self.skipped[-1].offset == last_chunk and length >= 6:
                entries = struct.unpack_from("<I", bio.read(6), 2)[0] // 16  # a skipped chunk's message index
                self.skipped[-1].messages = (self.skipped[-1].messages or 0) + entries
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
        start_ns, end_ns, usize, crc, clen = struct.unpack_from("<QQQII", head)
        comp = bio.read(min(clen, max(0, available - 32))).decode("ascii", "replace")
        rec_len_raw = bio.read(8)
        if len(comp) < clen or len(rec_len_raw) < 8:
            self._problem(body_at - 9, "truncated chunk header")
            return
        declared = struct.unpack("<Q", rec_len_raw)[0]
        offset = body_at + 32 + clen + 8
        present = max(0, min(declared, self.size - offset))
        chunk = _Chunk(offset, present, declared, comp, usize, crc, start_ns, end_ns)
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
            if complete:
                data = chunk_records(raw, chunk.compression, chunk.uncompressed_size)
                if chunk.crc and zlib.crc32(data) != chunk.crc:
                    raise ValueError("chunk checksum mismatch")
            elif chunk.compression == "":
                data = raw
            else:  # what a cut compressed stream gives
                data = _partial_records(raw, chunk.compression)
        except Exception as exc:
            if report:
                reason = str(exc) if "mismatch" in str(exc) else f"chunk does not decompress ({exc})"
                self.skipped.append(ChunkDamage(at, chunk.start_ns, chunk.end_ns, reason))
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


def _partial_records(raw: bytes, compression: str) -> bytes:
    """What a cut ``zstd`` or ``lz4`` stream decompresses to."""
    if compression == "zstd":
        from backports import zstd  # rosbags' own dependency

        return zstd.ZstdDecompressor().decompress(raw)
    if compression == "lz4":
        import lz4.frame

        return lz4.frame.LZ4FrameDecompressor().decompress(raw)
    raise ValueError(f"unsupported chunk compression {compression!r}")


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
