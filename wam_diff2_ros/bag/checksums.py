"""MCAP checksums: :func:`write_checksums` fills in the CRCs of a finished MCAP file (each chunk's, the data
section's and the summary's; rosbags writes 0, "not computed", in every one), :func:`damaged_chunks` finds the
chunks whose records do not match their CRC. A CRC of 0 is never checked: it means "not computed" in MCAP.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

MCAP_MAGIC = b"\x89MCAP0\r\n"
_FOOTER = 9 + 8 + 8 + 4 + 8  # footer record (opcode, length, summary start, offsets start, crc) and the magic
_CHUNK_HEAD = 8 + 8 + 8 + 4  # message start and end time, uncompressed size, uncompressed CRC
_BLOCK = 1 << 20


@dataclass
class ChunkDamage:
    """A chunk whose records cannot be trusted: where it is, the receive times it covers, why, and how many
    messages its message index lists (None when unknown)."""

    offset: int  # file offset of the chunk record
    start_ns: int  # message_start_time
    end_ns: int  # message_end_time
    reason: str
    messages: int | None = None

    def describe(self) -> str:
        """One line: why, the time range, the messages lost and the byte offset."""
        lost = "" if self.messages is None else f", {self.messages} message(s)"
        return (
            f"{self.reason}: chunk at byte {self.offset} skipped (messages {self.start_ns}..{self.end_ns} ns, "
            f"{(self.end_ns - self.start_ns) / 1e9:.3f} s{lost})"
        )


def chunk_records(raw: bytes, compression: str, uncompressed_size: int) -> bytes:
    """A chunk's records field decompressed (``""``, ``zstd`` or ``lz4``); ValueError when it cannot be."""
    if compression == "":
        data = raw
    elif compression == "zstd":
        from backports import zstd  # rosbags' own dependency

        data = zstd.ZstdDecompressor().decompress(raw)
    elif compression == "lz4":
        import lz4.frame

        data = lz4.frame.LZ4FrameDecompressor().decompress(raw)
    else:
        raise ValueError(f"unsupported chunk compression {compression!r}")
    if len(data) != uncompressed_size:
        raise ValueError(f"chunk size mismatch ({len(data)} bytes, {uncompressed_size} declared)")
    return data


def _records(bio: BinaryIO, size: int) -> Iterator[tuple[int, int, bytes]]:
    """``(offset, opcode, body)`` of each complete chunk record (0x06) of the data section and, last, of the data
    end record (0x0F) when the scan reaches it; other records are skipped unread."""
    pos = len(MCAP_MAGIC)
    while pos + 9 <= size:
        bio.seek(pos)
        head = bio.read(9)
        opcode, length = head[0], struct.unpack_from("<Q", head, 1)[0]
        if pos + 9 + length > size or opcode == 0x02:
            return
        if opcode == 0x0F:
            yield pos, opcode, b""
            return
        if opcode == 0x06 and length >= _CHUNK_HEAD + 4 + 8:
            yield pos, opcode, bio.read(length)
        pos += 9 + length


def _split_chunk(rest: bytes) -> tuple[str, bytes]:
    (comp_len,) = struct.unpack_from("<I", rest)
    compression = rest[4 : 4 + comp_len].decode("ascii", "replace")
    (records_len,) = struct.unpack_from("<Q", rest, 4 + comp_len)
    start = 4 + comp_len + 8
    if start + records_len > len(rest):
        raise ValueError("chunk records run past the chunk record")
    return compression, rest[start : start + records_len]


def write_checksums(path: str | Path) -> None:
    """Write the CRC of every chunk (of its uncompressed records), of the data section (every byte before the
    data end record) and of the summary into the finished MCAP file at ``path``, as rosbag2's MCAP writer does
    (chunk and summary CRCs by default, the data section's with ``enableDataCRC``)."""
    with Path(path).open("r+b") as bio:
        size = bio.seek(0, 2)
        data_end = None
        for offset, opcode, body in _records(bio, size):  # it seeks to each record itself
            if opcode == 0x0F:
                data_end = offset
                continue
            compression, raw = _split_chunk(body[_CHUNK_HEAD:])
            usize = struct.unpack_from("<Q", body, 16)[0]
            bio.seek(offset + 9 + 24)
            bio.write(struct.pack("<I", zlib.crc32(chunk_records(raw, compression, usize))))
        if data_end is not None:
            crc = _crc_of_range(bio, 0, data_end)
            bio.seek(data_end + 9)
            bio.write(struct.pack("<I", crc))
        bio.seek(size - _FOOTER)
        tail = bio.read(_FOOTER)
        if tail[-8:] != MCAP_MAGIC or tail[0] != 0x02:
            return
        summary_start = struct.unpack_from("<Q", tail, 9)[0]
        if summary_start == 0:
            return
        crc = zlib.crc32(tail[:25], _crc_of_range(bio, summary_start, size - _FOOTER))
        bio.seek(size - _FOOTER + 25)
        bio.write(struct.pack("<I", crc))


def _crc_of_range(bio: BinaryIO, start: int, end: int) -> int:
    crc, pos = 0, start
    bio.seek(start)
    while pos < end:
        block = bio.read(min(_BLOCK, end - pos))
        if not block:
            break
        crc = zlib.crc32(block, crc)
        pos += len(block)
    return crc


def damaged_chunks(path: str | Path) -> list[ChunkDamage]:
    """The chunks of the MCAP file at ``path`` whose records fail their CRC (or do not decompress to their
    declared size); chunks with CRC 0 are only checked for size. A cut or unreadable file gives what was found up
    to there (the recovery scan reports the rest)."""
    path = Path(path)
    stat = path.stat()
    return list(_damaged_chunks(str(path), stat.st_size, stat.st_mtime_ns))


@lru_cache(maxsize=32)
def _damaged_chunks(path: str, size: int, mtime_ns: int) -> tuple[ChunkDamage, ...]:
    del mtime_ns  # part of the cache key only
    damage = []
    with open(path, "rb") as bio:
        if bio.read(len(MCAP_MAGIC)) != MCAP_MAGIC:
            return ()
        for offset, opcode, body in _records(bio, size):
            if opcode != 0x06:
                continue
            start_ns, end_ns, usize, crc = struct.unpack_from("<QQQI", body)
            try:
                compression, raw = _split_chunk(body[_CHUNK_HEAD:])
                data = chunk_records(raw, compression, usize)
            except Exception as exc:  # a damaged header, compressed stream or size
                damage.append(ChunkDamage(offset, start_ns, end_ns, f"chunk unreadable ({exc})"))
                continue
            if crc and zlib.crc32(data) != crc:
                damage.append(ChunkDamage(offset, start_ns, end_ns, "chunk checksum mismatch"))
    return tuple(damage)
