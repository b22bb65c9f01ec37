"""ROS messages → the core's sample types (and RGB arrays), with a clear reason for every bad message.

No rclpy node is needed: the functions read message fields only (``sensor_msgs``, ``nav_msgs``,
``geometry_msgs``, ``std_msgs`` and this package's ``DrivingCommand``), so the node's callbacks and the
rosbag replay tool share them. Every problem raises :class:`ImageConversionError` /
:class:`~wam_diff2_ros.core.samples.InputError` with a message naming the field and value.

Raw images (``sensor_msgs/Image``) are converted to HxWx3 uint8 RGB with OpenCV, following cv_bridge's
conversion table (``cv_bridge.toCvCopy(msg, "rgb8")``), so the pixels are identical to cv_bridge's:

==============================================  =====================================================
``rgb8`` ``bgr8`` ``rgba8`` ``bgra8``           channel reorder (``cvtColor``), alpha dropped
``mono8``                                       ``COLOR_GRAY2RGB``
``rgb16`` ``bgr16`` ``rgba16`` ``bgra16``       as the 8-bit ones, then 16 → 8 bit as cv_bridge:
``mono16``                                      ``convertTo(CV_8U, 255/65535)`` = round(v / 257);
                                                ``is_bigendian`` respected
``yuv422`` = ``uyvy`` (U Y0 V Y1)               ``COLOR_YUV2RGB_UYVY`` (BT.601 limited range)
``yuv422_yuy2`` = ``yuyv`` (Y0 U Y1 V)          ``COLOR_YUV2RGB_YUY2``
``bayer_{rggb,bggr,gbrg,grbg}{8,16}``           ``COLOR_Bayer{BG,RG,GR,GB}2RGB`` (16 bit: demosaic, then
                                                scale)
``nv21`` (Y plane, then V U rows, 4:2:0)        ``COLOR_YUV2RGB_NV21``; cv_bridge has no entry
``nv24`` (Y plane, then U V rows, 4:4:4)        OpenCV's 4:2:2 arithmetic per pixel; cv_bridge has none
``8UC1`` ``8UC3`` ``8UC4`` ``16UC1/3/4``        read as OpenCV's grey / BGR / BGRA (what
                                                ``cv2_to_imgmsg`` publishes); cv_bridge passes these
                                                through only
==============================================  =====================================================

Row padding (``step`` > width × bytes per pixel) is handled; NV21/NV24 carry ``height`` Y rows of
``step`` bytes, then ``height / 2`` (NV21) or ``height`` rows of ``2 × step`` bytes (NV24) of chroma.
``step`` too small, too little data, an odd width for YUV 4:2:2 (odd sizes for NV21), a zero-sized image
or an unknown encoding are errors. Compressed images (``sensor_msgs/CompressedImage``): JPEG and PNG
(8 or 16 bit, grey, RGB, RGBA, palette) decoded with ``cv2.imdecode(IMREAD_UNCHANGED)`` as cv_bridge does,
recognised by their magic bytes, so every ``format`` string image_transport writes (``jpeg``, ``png``,
``bgr8; jpeg compressed bgr8``) works; a truncated JPEG and ``compressedDepth`` are refused.

Header checks: a zero stamp is refused (the planner relates inputs by stamp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from wam_diff2_ros.core.camera import CameraIntrinsics
from wam_diff2_ros.core.frames import EgoPose, ego_pose, yaw_from_quaternion
from wam_diff2_ros.core.image_headers import JPEG_MAGIC, PNG_MAGIC, jpeg_header, png_header
from wam_diff2_ros.core.prompts import COMMAND_ORDER, parse_navigation_command
from wam_diff2_ros.core.samples import (
    AccelerationSample,
    CommandSample,
    ImageSample,
    InputError,
    LazyImage,
    OdometrySample,
)
from wam_diff2_ros.core.units import NS_PER_S

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
#
# The conversion to RGB follows cv_bridge's ``toCvCopy(msg, "rgb8")`` (cv_bridge.cpp: getCvType,
# getEncoding, getConversionCodes, getConversionCode, toCvCopyImpl; ros-perception/vision_opencv):
# the rows are viewed as an OpenCV matrix of the encoding's type, byte-swapped to native order when
# ``is_bigendian`` says so, converted with the table's ``cv2.cvtColor`` code and, for 16-bit sources,
# scaled to 8 bits as ``Mat::convertTo(CV_8U, 255/65535)`` does (round(v / 257); not the high byte).


@dataclass(frozen=True)
class _RawFormat:
    """How one ``sensor_msgs/Image`` encoding is laid out and converted to RGB."""

    channels: int  # values per pixel in a row (YUV 4:2:2: 2; NV21/NV24: 1, the Y plane)
    depth: int  # bytes per value: 1 or 2
    code: str | None  # cv2 colour conversion code name (None: the rows already are RGB)
    layout: str = "packed"  # packed | nv21 | nv24


def _bayer_code(opencv_pattern: str) -> str:
    return f"COLOR_Bayer{opencv_pattern}2RGB"


# ROS Bayer names give the top-left 2x2 cell; OpenCV's give the second row's 2nd and 3rd pixels, so
# ROS rggb is OpenCV BG, bggr is RG, gbrg is GR, grbg is GB (cv_bridge's table).
_BAYER = {"rggb": "BG", "bggr": "RG", "gbrg": "GR", "grbg": "GB"}

_FORMATS: dict[str, _RawFormat] = {
    "rgb8": _RawFormat(3, 1, None),
    "bgr8": _RawFormat(3, 1, "COLOR_BGR2RGB"),
    "rgba8": _RawFormat(4, 1, "COLOR_RGBA2RGB"),
    "bgra8": _RawFormat(4, 1, "COLOR_BGRA2RGB"),
    "mono8": _RawFormat(1, 1, "COLOR_GRAY2RGB"),
    "rgb16": _RawFormat(3, 2, None),
    "bgr16": _RawFormat(3, 2, "COLOR_BGR2RGB"),
    "rgba16": _RawFormat(4, 2, "COLOR_RGBA2RGB"),
    "bgra16": _RawFormat(4, 2, "COLOR_BGRA2RGB"),
    "mono16": _RawFormat(1, 2, "COLOR_GRAY2RGB"),
    # UYVY (deprecated name yuv422) and YUYV (deprecated name yuv422_yuy2), BT.601 limited range.
    "yuv422": _RawFormat(2, 1, "COLOR_YUV2RGB_UYVY"),
    "uyvy": _RawFormat(2, 1, "COLOR_YUV2RGB_UYVY"),
    "yuv422_yuy2": _RawFormat(2, 1, "COLOR_YUV2RGB_YUY2"),
    "yuyv": _RawFormat(2, 1, "COLOR_YUV2RGB_YUY2"),
    # Semi-planar: a Y plane, then chroma. cv_bridge's table has no entry for these sensor_msgs
    # encodings; NV21 (4:2:0, V before U) uses OpenCV's own code, NV24 (4:4:4, U before V) OpenCV's
    # 4:2:2 arithmetic with each pixel paired with itself (OpenCV has no NV24 code).
    "nv21": _RawFormat(1, 1, "COLOR_YUV2RGB_NV21", layout="nv21"),
    "nv24": _RawFormat(1, 1, "COLOR_YUV2RGB_YUY2", layout="nv24"),
    # OpenCV type names: cv_bridge only passes these through (its table refuses to colour-convert
    # them); they are read as OpenCV's own layouts, i.e. what cv2_to_imgmsg publishes for a cv2 image.
    "8UC1": _RawFormat(1, 1, "COLOR_GRAY2RGB"),
    "8UC3": _RawFormat(3, 1, "COLOR_BGR2RGB"),
    "8UC4": _RawFormat(4, 1, "COLOR_BGRA2RGB"),
    "16UC1": _RawFormat(1, 2, "COLOR_GRAY2RGB"),
    "16UC3": _RawFormat(3, 2, "COLOR_BGR2RGB"),
    "16UC4": _RawFormat(4, 2, "COLOR_BGRA2RGB"),
    **{
        f"bayer_{ros}{bits}": _RawFormat(1, bits // 8, _bayer_code(cv))
        for ros, cv in _BAYER.items()
        for bits in (8, 16)
    },
}

SUPPORTED_ENCODINGS: tuple[str, ...] = tuple(_FORMATS)


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise ImageConversionError(
            "OpenCV (cv2) is not importable: pip install opencv-python-headless, or apt install python3-opencv"
        ) from exc
    return cv2


def _code(cv2: Any, name: str) -> int:
    return int(getattr(cv2, name))


def _alias(encoding: str) -> str:
    """``8UC`` (no count) is one channel, as sensor_msgs' image_encodings reads it."""
    return encoding + "1" if encoding in ("8UC", "16UC") else encoding


def _row_bytes(fmt: _RawFormat, width: int) -> int:
    return width * fmt.channels * fmt.depth


def _plane_rows(fmt: _RawFormat, height: int) -> int:
    """Rows of ``step`` bytes the data must hold (semi-planar formats carry their chroma after Y)."""
    if fmt.layout == "nv21":
        return height + height // 2
    if fmt.layout == "nv24":
        return 3 * height
    return height


def raw_image_problem(msg: Any) -> str | None:
    """Why a ``sensor_msgs/Image`` cannot be converted (cheap header checks), None when it can."""
    encoding = _alias(str(msg.encoding))
    width, height, step = int(msg.width), int(msg.height), int(msg.step)
    fmt = _FORMATS.get(encoding)
    if fmt is None:
        return f"unsupported encoding {str(msg.encoding)!r} (supported: {', '.join(SUPPORTED_ENCODINGS)})"
    if width == 0 or height == 0:
        return f"image has no pixels ({width}x{height})"
    if width * height > MAX_IMAGE_PIXELS:
        return f"image of {width}x{height} exceeds {MAX_IMAGE_PIXELS} pixels"
    row_bytes = _row_bytes(fmt, width)
    if step < row_bytes:
        bytes_per_pixel = fmt.channels * fmt.depth
        return f"step {step} is smaller than width {width} × {bytes_per_pixel} bytes per pixel ({encoding})"
    if fmt.channels == 2 and width % 2:
        return f"YUV 4:2:2 needs an even width, got {width}"
    if fmt.layout == "nv21" and (width % 2 or height % 2):
        return f"NV21 needs an even width and height, got {width}x{height}"
    rows = _plane_rows(fmt, height)
    if len(msg.data) < step * rows:
        what = "step × height" if rows == height else f"step × {rows} rows (Y plane and chroma)"
        return f"data has {len(msg.data)} bytes, expected {what} = {step} × {rows} = {step * rows}"
    return None


def _scale_to_8bit(cv2: Any, values: np.ndarray) -> np.ndarray:
    """cv_bridge's 16 → 8 bit depth change: ``convertTo(CV_8U, 255.0 / 65535.0)``, i.e. round(v / 257)."""
    return cv2.convertScaleAbs(values, alpha=255.0 / 65535.0)


def _convert_packed(cv2: Any, fmt: _RawFormat, buffer: np.ndarray, width: int, height: int, big: bool) -> np.ndarray:
    rows = buffer[:height, : _row_bytes(fmt, width)]
    if fmt.depth == 2:
        values = np.ascontiguousarray(rows).view(">u2" if big else "<u2")
        # Native byte order, as cv_bridge's matFromImage swaps bytes (no copy when already native).
        image = values.astype(np.uint16, copy=False).reshape(height, width, fmt.channels)
        if fmt.code is not None and "Bayer" in fmt.code:
            # Demosaic at full depth, then scale (the order of cv_bridge's table).
            return _scale_to_8bit(cv2, cv2.cvtColor(image[:, :, 0], _code(cv2, fmt.code)))
        image = _scale_to_8bit(cv2, image)  # channel copies commute with the scaling: scale first
    else:
        image = rows.reshape(height, width, fmt.channels)
    if fmt.code is None:
        return image.copy() if fmt.depth == 1 else image  # never a view of msg.data
    source = image.reshape(height, width) if fmt.channels == 1 else image
    return cv2.cvtColor(source, _code(cv2, fmt.code))


def _convert_semi_planar(cv2: Any, fmt: _RawFormat, buffer: np.ndarray, width: int, height: int) -> np.ndarray:
    if fmt.layout == "nv21":
        planes = buffer[: height + height // 2, :width]  # Y rows, then V U interleaved rows
        return cv2.cvtColor(planes, _code(cv2, fmt.code or ""))
    step = buffer.shape[1]
    luma = np.ascontiguousarray(buffer[:height, :width]).reshape(height, width, 1)
    chroma = np.ascontiguousarray(buffer[height : 3 * height].reshape(height, 2 * step)[:, : 2 * width])
    pairs = np.empty((height, width, 4), dtype=np.uint8)  # Y U Y V: one 4:2:2 pair per 4:4:4 pixel
    cv2.mixChannels([luma, chroma.reshape(height, width, 2)], [pairs], [0, 0, 1, 1, 0, 2, 2, 3])
    doubled = cv2.cvtColor(pairs.reshape(height, 2 * width, 2), _code(cv2, fmt.code or ""))
    rgb = np.empty((height, width, 3), dtype=np.uint8)
    cv2.mixChannels([doubled.reshape(height, width, 6)], [rgb], [0, 0, 1, 1, 2, 2])  # every first pixel
    return rgb


def image_msg_to_rgb(msg: Any) -> np.ndarray:
    """``sensor_msgs/Image`` → HxWx3 uint8 RGB, pixel-identical to cv_bridge's ``toCvCopy(msg, "rgb8")``
    (a new array; see the module docstring for the encodings)."""
    problem = raw_image_problem(msg)
    if problem:
        raise ImageConversionError(problem)
    cv2 = _cv2()
    fmt = _FORMATS[_alias(str(msg.encoding))]
    width, height, step = int(msg.width), int(msg.height), int(msg.step)
    rows = _plane_rows(fmt, height)
    buffer = np.frombuffer(msg.data, dtype=np.uint8, count=step * rows).reshape(rows, step)
    try:
        if fmt.layout == "packed":
            rgb = _convert_packed(cv2, fmt, buffer, width, height, bool(msg.is_bigendian))
        else:
            rgb = _convert_semi_planar(cv2, fmt, buffer, width, height)
    except cv2.error as exc:  # e.g. a Bayer image too small to demosaic
        raise ImageConversionError(f"OpenCV cannot convert this {msg.encoding} image: {exc}") from exc
    return np.ascontiguousarray(rgb, dtype=np.uint8)


# ---------------------------------------------------------------------------------------------------
# Compressed images


def compressed_image_problem(msg: Any) -> str | None:
    """Why a ``sensor_msgs/CompressedImage`` cannot be decoded, as far as the header shows; None otherwise."""
    fmt = str(msg.format)
    if "compresseddepth" in fmt.lower():
        return f"compressedDepth images are not supported (format {fmt!r})"
    if len(msg.data) == 0:
        return "compressed image has no data"
    head = bytes(msg.data[:8])
    if not (head.startswith(JPEG_MAGIC) or head.startswith(PNG_MAGIC)):
        return f"data is neither JPEG nor PNG (format {fmt!r}, first bytes {head.hex()})"
    return None


def _decoded_to_rgb(cv2: Any, image: np.ndarray) -> np.ndarray:
    """What ``cv2.imdecode(..., IMREAD_UNCHANGED)`` gives (grey, BGR or BGRA; 8 or 16 bit) → RGB, with the
    table above (cv_bridge labels the decode mono8/bgr8/bgra8 by its channel count). A 16-bit PNG is scaled
    with the Image table's 16 → 8 bit rule; cv_bridge's compressed path would hand back 16-bit values labelled
    8-bit there."""
    if image.dtype == np.uint16:
        image = _scale_to_8bit(cv2, image)
    elif image.dtype != np.uint8:
        raise ImageConversionError(f"decoded image has unsupported depth {image.dtype}")
    channels = 1 if image.ndim == 2 else image.shape[2]
    codes = {1: "COLOR_GRAY2RGB", 3: "COLOR_BGR2RGB", 4: "COLOR_BGRA2RGB"}
    if channels not in codes:
        raise ImageConversionError(f"decoded image has {channels} channels")
    return cv2.cvtColor(image, _code(cv2, codes[channels]))


def compressed_msg_to_rgb(msg: Any) -> np.ndarray:
    """``sensor_msgs/CompressedImage`` (JPEG/PNG) → HxWx3 uint8 RGB with ``cv2.imdecode`` (as cv_bridge,
    EXIF orientation ignored); corrupt or truncated data raises :class:`ImageConversionError`."""
    problem = compressed_image_problem(msg)
    if problem:
        raise ImageConversionError(problem)
    cv2 = _cv2()
    data = np.frombuffer(msg.data, dtype=np.uint8)
    kind = "JPEG" if bytes(data[:3]) == JPEG_MAGIC else "PNG"
    # The headers first: libjpeg decodes a truncated stream with a warning (grey rows where data is missing),
    # and an image too large to decode must be refused before it is allocated.
    size = jpeg_header(data) if kind == "JPEG" else png_header(data)
    if isinstance(size, str):
        raise ImageConversionError(f"corrupt {kind} data ({size})")
    if size[0] * size[1] > MAX_IMAGE_PIXELS:
        raise ImageConversionError(f"{kind} of {size[0]}x{size[1]} exceeds {MAX_IMAGE_PIXELS} pixels (not decoded)")
    try:
        image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:
        raise ImageConversionError(f"corrupt {kind} data ({exc})") from exc
    if image is None or image.size == 0:
        raise ImageConversionError(f"corrupt {kind} data (OpenCV could not decode it)")
    if image.shape[0] * image.shape[1] > MAX_IMAGE_PIXELS:
        raise ImageConversionError(f"image of {image.shape[1]}x{image.shape[0]} is too large")
    return np.ascontiguousarray(_decoded_to_rgb(cv2, image))


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


def odometry_pose(msg: Any) -> EgoPose | None:
    """The ego pose of a ``nav_msgs/Odometry`` in its ``header.frame_id`` (None when unusable)."""
    pose = msg.pose.pose
    p, q = pose.position, pose.orientation
    return ego_pose(
        str(msg.header.frame_id),
        float(p.x),
        float(p.y),
        float(p.z),
        float(q.x),
        float(q.y),
        float(q.z),
        float(q.w),
    )


def odometry_track_point(msg: Any) -> tuple[int, float, float, float]:
    """``(header stamp ns, x, y, yaw)`` of a ``nav_msgs/Odometry``'s pose, as the replay's evaluation tracks the ego
    (yaw NaN when the orientation is not a rotation; the caller checks)."""
    pose = msg.pose.pose
    p, q = pose.position, pose.orientation
    yaw = yaw_from_quaternion(float(q.x), float(q.y), float(q.z), float(q.w))
    return stamp_to_ns(msg.header.stamp), float(p.x), float(p.y), math.nan if yaw is None else yaw


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
