"""Cheap checks of compressed image data when a frame arrives (no decoding; ROS-free).

A camera at 30 Hz cannot be decoded in the subscription callback, but a corrupt or truncated stream
must show in the ``inputs`` diagnostic at once, not only when (and if) the planner decodes a frame.
:func:`compressed_header_problem` reads only the headers:

* JPEG: starts with SOI (FF D8 FF); the marker segments up to the first start-of-frame (SOF0–SOF15,
  except DHT/JPG/DAC) are walked by their lengths (a few hundred bytes, skipping large APP segments
  without reading them) to find width and height (both > 0); then the data must end with EOI (FF D9),
  trailing zero padding allowed: a cut-off transfer has no EOI;
* PNG: the 8-byte signature, an IHDR chunk first (width and height > 0) and an IEND chunk at the end.

The work is O(number of header segments), independent of the image size. Pixel data is not checked:
a frame whose entropy-coded data is damaged but complete still fails later, when it is decoded.
"""

from __future__ import annotations

import struct

JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_EOI = b"\xff\xd9"
_PNG_IEND = b"IEND\xae\x42\x60\x82"
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # DHT, JPG and DAC are no frames
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])  # TEM, RST0-7: no length field
_MAX_TRAILING_PADDING = 4096


def _strip_padding(data: bytes | memoryview) -> memoryview:
    view = memoryview(data)
    end = len(view)
    limit = max(0, end - _MAX_TRAILING_PADDING)
    while end > limit and view[end - 1] == 0:
        end -= 1
    return view[:end]


def jpeg_header(data: bytes | memoryview) -> tuple[int, int] | str:
    """(width, height) of JPEG ``data``, or why its headers are broken (see the module docstring)."""
    view = memoryview(data)
    if bytes(view[:3]) != JPEG_MAGIC:
        return "data does not start with a JPEG SOI marker"
    position = 2
    length = len(view)
    while position + 4 <= length:
        if view[position] != 0xFF:
            return f"corrupt JPEG: expected a marker at byte {position}, found 0x{view[position]:02x}"
        marker = view[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in _STANDALONE:
            position += 2
            continue
        if marker in (0xD9, 0xDA):  # EOI or start of scan before any frame header
            return "corrupt JPEG: no frame header (SOF) before the image data"
        segment = struct.unpack_from(">H", view, position + 2)[0]
        if segment < 2:
            return f"corrupt JPEG: segment length {segment} at byte {position}"
        if marker in _SOF_MARKERS:
            if position + 9 > length:
                break
            height, width = struct.unpack_from(">HH", view, position + 5)
            if width == 0 or height == 0:
                return f"JPEG frame header gives no pixels ({width}x{height})"
            if bytes(_strip_padding(view)[-2:]) != _JPEG_EOI:
                return f"truncated JPEG: no end-of-image marker (FF D9) at the end of {len(view)} bytes"
            return width, height
        position += 2 + segment
    return "truncated JPEG: the data ends inside the headers"


def png_header(data: bytes | memoryview) -> tuple[int, int] | str:
    """(width, height) of PNG ``data``, or why its headers are broken."""
    view = memoryview(data)
    if bytes(view[:8]) != PNG_MAGIC:
        return "data does not start with the PNG signature"
    if len(view) < 33 or bytes(view[12:16]) != b"IHDR":
        return "corrupt PNG: no IHDR chunk after the signature"
    width, height = struct.unpack_from(">II", view, 16)
    if width == 0 or height == 0:
        return f"PNG header gives no pixels ({width}x{height})"
    if bytes(_strip_padding(view)[-8:]) != _PNG_IEND:
        return f"truncated PNG: no IEND chunk at the end of {len(view)} bytes"
    return width, height


def compressed_header_problem(data: bytes | memoryview, max_pixels: int | None = None) -> str | None:
    """Why compressed image ``data`` (JPEG or PNG, told by the magic bytes) is unusable as far as its
    headers show, None when they are sound. ``max_pixels`` also refuses larger images."""
    view = memoryview(data)
    if len(view) == 0:
        return "compressed image has no data"
    head = bytes(view[:8])
    if head.startswith(JPEG_MAGIC):
        found = jpeg_header(view)
    elif head.startswith(PNG_MAGIC):
        found = png_header(view)
    else:
        return f"data is neither JPEG nor PNG (first bytes {head.hex()})"
    if isinstance(found, str):
        return found
    width, height = found
    if max_pixels is not None and width * height > max_pixels:
        return f"image of {width}x{height} exceeds {max_pixels} pixels"
    return None
