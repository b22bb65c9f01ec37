"""ROS messages → the core's sample types (and RGB arrays), with a clear reason for every bad message.

No rclpy node is needed: the functions read message fields only (``sensor_msgs``, ``nav_msgs``,
``geometry_msgs``, ``std_msgs`` and this package's ``DrivingCommand``), so the node's callbacks and the
rosbag replay tool share them. Every problem raises :class:`ImageConversionError` /
:class:`~wam_diff2_ros.core.observation.InputError` with a message naming the field and value.

Raw images (``sensor_msgs/Image``), all converted to HxWx3 uint8 RGB:

=====================================  ===================================================
``rgb8`` ``bgr8`` ``rgba8`` ``bgra8``  channel reorder; alpha dropped
``mono8`` ``8UC1``                     grey replicated to three channels
``mono16`` ``16UC1``                   high byte (value / 256), ``is_bigendian`` respected
``rgb16`` ``bgr16`` ``rgba16`` ``bgra16``  high byte per channel
``yuv422`` / ``uyvy`` (U Y0 V Y1)      BT.601 limited range, as OpenCV/cv_bridge
``yuv422_yuy2`` / ``yuyv`` (Y0 U Y1 V)  same coefficients
``bayer_rggb8`` ``bggr8`` ``gbrg8`` ``grbg8``  2×2 cell demosaic (each cell's R, mean G, B)
=====================================  ===================================================

Row padding (``step`` > width × bytes per pixel) is handled; ``step`` too small, too little data, an
odd width for YUV 4:2:2, a zero-sized image or an unknown encoding are errors. Compressed images
(``sensor_msgs/CompressedImage``): JPEG and PNG (8 or 16 bit, grey, RGB, RGBA, palette), recognised
by their magic bytes, so every ``format`` string image_transport writes (``jpeg``, ``png``,
``bgr8; jpeg compressed bgr8``) works; ``compressedDepth`` is refused.

Header checks: a zero stamp is refused (the planner relates inputs by stamp).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from wam_diff2_ros.core.observation import (
    NS_PER_S,
    AccelerationSample,
    CameraIntrinsics,
    CommandSample,
    ImageSample,
    InputError,
    LazyImage,
    OdometrySample,
)
from wam_diff2_ros.core.prompts import COMMAND_ORDER, parse_navigation_command

MAX_IMAGE_PIXELS = 64_000_000


class ImageConversionError(InputError):
    """An image message that cannot be converted to RGB (the message says why)."""


# ---------------------------------------------------------------------------------------------------
# Time


def stamp_to_ns(stamp: Any) -> int:
    """``builtin_interfaces/Time`` → integer nanoseconds."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def ns_to_stamp(ns: int) -> Any:
    """Integer nanoseconds → ``builtin_interfaces/Time`` (negative values are clamped to 0)."""
    from builtin_interfaces.msg import Time

    ns = max(0, int(ns))
    return Time(sec=ns // NS_PER_S, nanosec=ns % NS_PER_S)


def ns_to_duration(ns: int) -> Any:
    """Integer nanoseconds → ``builtin_interfaces/Duration``."""
    from builtin_interfaces.msg import Duration

    ns = int(ns)
    return Duration(sec=ns // NS_PER_S, nanosec=ns % NS_PER_S)


def header_stamp_ns(msg: Any, what: str) -> int:
    """The header stamp of ``msg`` in ns; :class:`InputError` for a zero stamp."""
    ns = stamp_to_ns(msg.header.stamp)
    if ns == 0:
        raise InputError(f"{what} has header.stamp 0 (the publisher does not stamp its messages)")
    return ns


# ---------------------------------------------------------------------------------------------------
# Raw images

# encoding -> (bytes per pixel, decoder(array of shape (H, W*bpp) uint8 rows, width, bigendian) -> RGB)
_Decoder = Callable[[np.ndarray, int, bool], np.ndarray]


def _channels(rows: np.ndarray, width: int, count: int) -> np.ndarray:
    return rows.reshape(rows.shape[0], width, count)


def _high_bytes16(rows: np.ndarray, width: int, count: int, bigendian: bool) -> np.ndarray:
    dtype = np.dtype(">u2" if bigendian else "<u2")
    values = np.ascontiguousarray(rows).view(dtype).reshape(rows.shape[0], width, count)
    return (values >> 8).astype(np.uint8)


def _grey_to_rgb(grey: np.ndarray) -> np.ndarray:
    return np.repeat(grey[:, :, None], 3, axis=2)


def _yuv_to_rgb(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """BT.601 limited-range YUV → RGB (the coefficients OpenCV's YUV 4:2:2 conversions use)."""
    c = (y.astype(np.float32) - 16.0) * 1.164
    d = u.astype(np.float32) - 128.0
    e = v.astype(np.float32) - 128.0
    rgb = np.stack([c + 1.596 * e, c - 0.391 * d - 0.813 * e, c + 2.018 * d], axis=-1)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def _yuv422(order: str) -> _Decoder:
    """Decoder for packed 4:2:2 with byte order ``order`` (e.g. ``"UYVY"``)."""
    index = {name: order.index(name) for name in "UV"}
    y_positions = [i for i, name in enumerate(order) if name == "Y"]

    def decode(rows: np.ndarray, width: int, bigendian: bool) -> np.ndarray:
        if width % 2:
            raise ImageConversionError(f"YUV 4:2:2 needs an even width, got {width}")
        macro = rows.reshape(rows.shape[0], width // 2, 4)
        y = np.empty((rows.shape[0], width), dtype=np.uint8)
        y[:, 0::2] = macro[:, :, y_positions[0]]
        y[:, 1::2] = macro[:, :, y_positions[1]]
        u = np.repeat(macro[:, :, index["U"]], 2, axis=1)
        v = np.repeat(macro[:, :, index["V"]], 2, axis=1)
        return _yuv_to_rgb(y, u, v)

    return decode


def _bayer(pattern: str) -> _Decoder:
    """2×2 cell demosaic for a Bayer ``pattern`` (cell positions (0,0) (0,1) (1,0) (1,1), e.g. ``"RGGB"``)."""

    def decode(rows: np.ndarray, width: int, bigendian: bool) -> np.ndarray:
        height = rows.shape[0]
        if width % 2 or height % 2:
            raise ImageConversionError(f"Bayer images need even sizes, got {width}x{height}")
        raw = rows.reshape(height, width).astype(np.uint16)
        planes = [raw[0::2, 0::2], raw[0::2, 1::2], raw[1::2, 0::2], raw[1::2, 1::2]]
        red = planes[pattern.index("R")]
        blue = planes[pattern.index("B")]
        greens = [planes[i] for i, letter in enumerate(pattern) if letter == "G"]
        green = (greens[0] + greens[1] + 1) // 2
        rgb = np.stack([red, green, blue], axis=-1).astype(np.uint8)
        return np.repeat(np.repeat(rgb, 2, axis=0), 2, axis=1)

    return decode


_DECODERS: dict[str, tuple[int, _Decoder]] = {
    "rgb8": (3, lambda r, w, b: _channels(r, w, 3)),
    "bgr8": (3, lambda r, w, b: _channels(r, w, 3)[:, :, ::-1]),
    "rgba8": (4, lambda r, w, b: _channels(r, w, 4)[:, :, :3]),
    "bgra8": (4, lambda r, w, b: _channels(r, w, 4)[:, :, 2::-1]),
    "mono8": (1, lambda r, w, b: _grey_to_rgb(_channels(r, w, 1)[:, :, 0])),
    "8UC1": (1, lambda r, w, b: _grey_to_rgb(_channels(r, w, 1)[:, :, 0])),
    "mono16": (2, lambda r, w, b: _grey_to_rgb(_high_bytes16(r, w, 1, b)[:, :, 0])),
    "16UC1": (2, lambda r, w, b: _grey_to_rgb(_high_bytes16(r, w, 1, b)[:, :, 0])),
    "rgb16": (6, lambda r, w, b: _high_bytes16(r, w, 3, b)),
    "bgr16": (6, lambda r, w, b: _high_bytes16(r, w, 3, b)[:, :, ::-1]),
    "rgba16": (8, lambda r, w, b: _high_bytes16(r, w, 4, b)[:, :, :3]),
    "bgra16": (8, lambda r, w, b: _high_bytes16(r, w, 4, b)[:, :, 2::-1]),
    "yuv422": (2, _yuv422("UYVY")),
    "uyvy": (2, _yuv422("UYVY")),
    "yuv422_yuy2": (2, _yuv422("YUYV")),
    "yuyv": (2, _yuv422("YUYV")),
    "bayer_rggb8": (1, _bayer("RGGB")),
    "bayer_bggr8": (1, _bayer("BGGR")),
    "bayer_gbrg8": (1, _bayer("GBRG")),
    "bayer_grbg8": (1, _bayer("GRBG")),
}

SUPPORTED_ENCODINGS: tuple[str, ...] = tuple(_DECODERS)


def raw_image_problem(msg: Any) -> str | None:
    """Why a ``sensor_msgs/Image`` cannot be converted (cheap header checks), None when it can."""
    encoding = str(msg.encoding)
    width, height, step = int(msg.width), int(msg.height), int(msg.step)
    if encoding not in _DECODERS:
        return f"unsupported encoding {encoding!r} (supported: {', '.join(SUPPORTED_ENCODINGS)})"
    if width == 0 or height == 0:
        return f"image has no pixels ({width}x{height})"
    if width * height > MAX_IMAGE_PIXELS:
        return f"image of {width}x{height} exceeds {MAX_IMAGE_PIXELS} pixels"
    bytes_per_pixel = _DECODERS[encoding][0]
    row_bytes = width * bytes_per_pixel
    if step < row_bytes:
        return f"step {step} is smaller than width {width} × {bytes_per_pixel} bytes per pixel ({encoding})"
    if len(msg.data) < step * height:
        return f"data has {len(msg.data)} bytes, expected step × height = {step} × {height} = {step * height}"
    return None


def image_msg_to_rgb(msg: Any) -> np.ndarray:
    """``sensor_msgs/Image`` → HxWx3 uint8 RGB (a new array; see the module docstring for encodings)."""
    problem = raw_image_problem(msg)
    if problem:
        raise ImageConversionError(problem)
    encoding = str(msg.encoding)
    width, height, step = int(msg.width), int(msg.height), int(msg.step)
    bytes_per_pixel, decode = _DECODERS[encoding]
    buffer = np.frombuffer(msg.data, dtype=np.uint8, count=step * height).reshape(height, step)
    rows = buffer[:, : width * bytes_per_pixel]
    return np.ascontiguousarray(decode(rows, width, bool(msg.is_bigendian)), dtype=np.uint8)


# ---------------------------------------------------------------------------------------------------
# Compressed images

_JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def compressed_image_problem(msg: Any) -> str | None:
    """Why a ``sensor_msgs/CompressedImage`` cannot be decoded, as far as the header shows; None otherwise."""
    fmt = str(msg.format)
    if "compresseddepth" in fmt.lower():
        return f"compressedDepth images are not supported (format {fmt!r})"
    if len(msg.data) == 0:
        return "compressed image has no data"
    head = bytes(msg.data[:8])
    if not (head.startswith(_JPEG_MAGIC) or head.startswith(_PNG_MAGIC)):
        return f"data is neither JPEG nor PNG (format {fmt!r}, first bytes {head.hex()})"
    return None


def _pil_to_rgb(picture: Any) -> np.ndarray:
    mode = picture.mode
    if mode in ("I;16", "I;16B", "I;16L", "I"):
        values = np.asarray(picture).astype(np.uint32)
        if mode == "I" and values.max(initial=0) > 65535:
            raise ImageConversionError("32-bit PNG images are not supported")
        return _grey_to_rgb((values >> 8).astype(np.uint8))
    if mode != "RGB":
        picture = picture.convert("RGB")
    return np.asarray(picture, dtype=np.uint8)


def compressed_msg_to_rgb(msg: Any) -> np.ndarray:
    """``sensor_msgs/CompressedImage`` (JPEG/PNG) → HxWx3 uint8 RGB; corrupt or truncated data raises."""
    from PIL import Image as PILImage

    problem = compressed_image_problem(msg)
    if problem:
        raise ImageConversionError(problem)
    kind = "JPEG" if bytes(msg.data[:3]) == _JPEG_MAGIC else "PNG"
    try:
        with PILImage.open(io.BytesIO(bytes(msg.data))) as picture:
            picture.load()
            if picture.width * picture.height > MAX_IMAGE_PIXELS:
                raise ImageConversionError(f"image of {picture.width}x{picture.height} is too large")
            rgb = _pil_to_rgb(picture)
    except ImageConversionError:
        raise
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError ...
        raise ImageConversionError(f"corrupt {kind} data ({type(exc).__name__}: {exc})") from exc
    if rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ImageConversionError(f"image has no pixels ({rgb.shape[1]}x{rgb.shape[0]})")
    return np.ascontiguousarray(rgb)


# ---------------------------------------------------------------------------------------------------
# Samples for the observation buffer


def image_sample(msg: Any, receive_ns: int, frame_id: str = "") -> ImageSample:
    """An :class:`ImageSample` of a raw ``Image``: header checked now, pixels converted on first use.

    ``frame_id`` overrides an empty ``header.frame_id``.
    """
    problem = raw_image_problem(msg)
    if problem:
        raise ImageConversionError(problem)
    stamp = header_stamp_ns(msg, "image")
    return ImageSample(
        stamp_ns=stamp,
        receive_ns=int(receive_ns),
        frame_id=str(msg.header.frame_id) or frame_id,
        image=LazyImage(lambda: image_msg_to_rgb(msg)),
        encoding=str(msg.encoding),
    )


def compressed_image_sample(msg: Any, receive_ns: int, frame_id: str = "") -> ImageSample:
    """An :class:`ImageSample` of a ``CompressedImage``: header checked now, decoded on first use."""
    problem = compressed_image_problem(msg)
    if problem:
        raise ImageConversionError(problem)
    stamp = header_stamp_ns(msg, "compressed image")
    return ImageSample(
        stamp_ns=stamp,
        receive_ns=int(receive_ns),
        frame_id=str(msg.header.frame_id) or frame_id,
        image=LazyImage(lambda: compressed_msg_to_rgb(msg)),
        encoding=str(msg.format),
    )


def camera_info_intrinsics(msg: Any) -> CameraIntrinsics | None:
    """Intrinsics from ``sensor_msgs/CameraInfo`` (``k``; binning divides them); None for an uncalibrated
    camera (all-zero ``k``). Non-finite or negative values raise :class:`InputError`."""
    k = [float(v) for v in msg.k]
    if len(k) != 9:
        raise InputError(f"camera_info k has {len(k)} values, expected 9")
    if not all(math.isfinite(v) for v in k):
        raise InputError("camera_info k contains a non-finite value")
    if all(v == 0.0 for v in k):
        return None
    bx = int(msg.binning_x) or 1
    by = int(msg.binning_y) or 1
    width, height = int(msg.width) // bx, int(msg.height) // by
    if width <= 0 or height <= 0:
        raise InputError(f"camera_info has no image size ({msg.width}x{msg.height})")
    return CameraIntrinsics(k[0] / bx, k[4] / by, k[2] / bx, k[5] / by, width, height, source="camera_info")


def odometry_sample(msg: Any, receive_ns: int) -> OdometrySample:
    """``nav_msgs/Odometry`` → velocity (twist linear x, y) and yaw rate (angular z) in the child frame."""
    twist = msg.twist.twist
    values = (float(twist.linear.x), float(twist.linear.y), float(twist.angular.z))
    if not all(math.isfinite(v) for v in values):
        raise InputError(
            f"odometry twist is not finite (linear.x={values[0]}, linear.y={values[1]}, angular.z={values[2]})"
        )
    stamp = header_stamp_ns(msg, "odometry")
    return OdometrySample(stamp, int(receive_ns), *values)


def acceleration_sample(msg: Any, receive_ns: int) -> AccelerationSample:
    """``geometry_msgs/AccelWithCovarianceStamped`` → linear acceleration x, y (base_link)."""
    linear = msg.accel.accel.linear
    ax, ay = float(linear.x), float(linear.y)
    if not (math.isfinite(ax) and math.isfinite(ay)):
        raise InputError(f"acceleration is not finite (linear.x={ax}, linear.y={ay})")
    stamp = header_stamp_ns(msg, "acceleration")
    return AccelerationSample(stamp, int(receive_ns), ax, ay)


def command_from_string(msg: Any, receive_ns: int) -> CommandSample:
    """``std_msgs/String`` ``left``/``straight``/``right``/``unknown`` (any case, trimmed); stamp = receive
    time (String has no header)."""
    try:
        command = parse_navigation_command(str(msg.data))
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    return CommandSample(command, int(receive_ns), int(receive_ns))


def command_from_driving_command(msg: Any, receive_ns: int) -> CommandSample:
    """This package's ``DrivingCommand`` (constants 0..3 in NAVSIM order); a zero stamp means receive time."""
    value = int(msg.command)
    if not 0 <= value < len(COMMAND_ORDER):
        raise InputError(f"DrivingCommand.command {value} is not one of 0..{len(COMMAND_ORDER) - 1}")
    stamp = stamp_to_ns(msg.header.stamp) or int(receive_ns)
    return CommandSample(COMMAND_ORDER[value], stamp, int(receive_ns))


# ---------------------------------------------------------------------------------------------------
# Outgoing images


def rgb_to_image_msg(rgb: np.ndarray, stamp_ns: int, frame_id: str) -> Any:
    """HxWx3 uint8 RGB array → ``sensor_msgs/Image`` (rgb8), data set from bytes (fast path)."""
    from sensor_msgs.msg import Image

    array = np.ascontiguousarray(rgb, dtype=np.uint8)
    if array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 array, got shape {array.shape}")
    msg = Image()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(array.shape[0]), int(array.shape[1])
    msg.encoding = "rgb8"
    msg.is_bigendian = 0
    msg.step = msg.width * 3
    msg.data = array.tobytes()
    return msg
