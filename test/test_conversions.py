"""ros.conversions: every image encoding, compressed images, bad messages, telemetry and commands.

Messages are real rclpy message objects, and most go through CDR serialisation first, so ``data``
has the type DDS delivers.
"""

from __future__ import annotations

import io
import math
import re

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from geometry_msgs.msg import AccelWithCovarianceStamped
from nav_msgs.msg import Odometry
from PIL import Image as PILImage
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import String

from wam_diff2_ros.core.observation import InputError
from wam_diff2_ros.core.prompts import NavigationCommand
from wam_diff2_ros.ros import conversions
from wam_diff2_ros.ros.conversions import ImageConversionError

STAMP_NS = 1_700_000_123_456_789_000
RNG = np.random.default_rng(7)
RGB = RNG.integers(0, 256, size=(6, 10, 3), dtype=np.uint8)


def over_dds(msg):
    """The message as a subscriber receives it (serialised and deserialised)."""
    return deserialize_message(serialize_message(msg), type(msg))


def raw(encoding: str, pixels: np.ndarray, width: int, height: int, step: int | None = None, big: bool = False):
    rows = pixels.reshape(height, -1)
    row_bytes = rows.shape[1] * rows.itemsize
    step = step or row_bytes
    padded = np.zeros((height, step), dtype=np.uint8)
    padded[:, :row_bytes] = np.ascontiguousarray(rows).view(np.uint8).reshape(height, row_bytes)
    msg = Image()
    msg.header.stamp = conversions.ns_to_stamp(STAMP_NS)
    msg.header.frame_id = "cam_optical"
    msg.height, msg.width, msg.encoding, msg.step = height, width, encoding, step
    msg.is_bigendian = int(big)
    msg.data = padded.tobytes()
    return over_dds(msg)


# --- raw encodings --------------------------------------------------------------------------------------


@pytest.mark.parametrize("step_padding", [0, 7])
@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("rgb8", lambda rgb: rgb),
        ("bgr8", lambda rgb: rgb[:, :, ::-1]),
        ("rgba8", lambda rgb: np.dstack([rgb, np.full(rgb.shape[:2], 77, np.uint8)])),
        ("bgra8", lambda rgb: np.dstack([rgb[:, :, ::-1], np.full(rgb.shape[:2], 77, np.uint8)])),
    ],
)
def test_colour_encodings_give_rgb(encoding: str, encode, step_padding: int) -> None:
    pixels = encode(RGB)
    step = pixels.shape[1] * pixels.shape[2] + step_padding
    out = conversions.image_msg_to_rgb(raw(encoding, pixels, 10, 6, step=step))
    assert out.dtype == np.uint8 and out.shape == (6, 10, 3)
    np.testing.assert_array_equal(out, RGB)


@pytest.mark.parametrize("encoding", ["mono8", "8UC1"])
def test_mono8_is_replicated(encoding: str) -> None:
    grey = RGB[:, :, 0]
    out = conversions.image_msg_to_rgb(raw(encoding, grey, 10, 6))
    for channel in range(3):
        np.testing.assert_array_equal(out[:, :, channel], grey)


@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("encoding", ["mono16", "16UC1"])
def test_mono16_keeps_the_high_byte(encoding: str, big: bool) -> None:
    values = RNG.integers(0, 65536, size=(6, 10), dtype=np.uint16)
    pixels = values.astype(">u2" if big else "<u2")
    out = conversions.image_msg_to_rgb(raw(encoding, pixels, 10, 6, big=big))
    np.testing.assert_array_equal(out[:, :, 1], (values // 256).astype(np.uint8))


def test_rgb16_and_bgra16() -> None:
    values = RNG.integers(0, 65536, size=(6, 10, 3), dtype=np.uint16)
    out = conversions.image_msg_to_rgb(raw("rgb16", values.astype("<u2"), 10, 6))
    np.testing.assert_array_equal(out, (values >> 8).astype(np.uint8))
    bgra = np.dstack([values[:, :, ::-1], np.zeros((6, 10), np.uint16)]).astype("<u2")
    out = conversions.image_msg_to_rgb(raw("bgra16", bgra, 10, 6))
    np.testing.assert_array_equal(out, (values >> 8).astype(np.uint8))


# Reference YUV (BT.601 limited range) of a few colours: (Y, U, V) -> RGB.
YUV_REFERENCE = [
    ((16, 128, 128), (0, 0, 0)),
    ((235, 128, 128), (255, 255, 255)),
    ((126, 128, 128), (128, 128, 128)),
    ((81, 90, 240), (255, 0, 0)),
    ((145, 54, 34), (0, 255, 0)),
    ((41, 240, 110), (0, 0, 255)),
]


@pytest.mark.parametrize(
    ("encoding", "order"), [("yuv422", "UYVY"), ("uyvy", "UYVY"), ("yuv422_yuy2", "YUYV"), ("yuyv", "YUYV")]
)
def test_yuv422_packings(encoding: str, order: str) -> None:
    width = 2 * len(YUV_REFERENCE)
    packed = []
    for (y, u, v), _ in YUV_REFERENCE:
        values = {"Y": y, "U": u, "V": v}
        packed.extend(values[c] for c in order)  # both pixels of the pair share the colour
    pixels = np.array(packed, dtype=np.uint8).reshape(1, width * 2)
    out = conversions.image_msg_to_rgb(raw(encoding, pixels, width, 1))
    for index, (_, expected) in enumerate(YUV_REFERENCE):
        for pixel in (2 * index, 2 * index + 1):
            assert np.abs(out[0, pixel].astype(int) - np.array(expected)).max() <= 2, (index, out[0, pixel])


def test_yuv422_byte_orders_differ() -> None:
    # One pair with different luma in its two pixels: Y0 = 50 (dark), Y1 = 200 (bright), neutral chroma.
    uyvy = np.array([[128, 50, 128, 200]], dtype=np.uint8)
    yuyv = np.array([[50, 128, 200, 128]], dtype=np.uint8)
    a = conversions.image_msg_to_rgb(raw("yuv422", uyvy, 2, 1))
    b = conversions.image_msg_to_rgb(raw("yuv422_yuy2", yuyv, 2, 1))
    np.testing.assert_array_equal(a, b)
    assert a[0, 0, 0] < 60 < 190 < a[0, 1, 0]
    with pytest.raises(ImageConversionError, match="even width"):
        conversions.image_msg_to_rgb(raw("yuv422", np.zeros((1, 6), np.uint8), 3, 1))


@pytest.mark.parametrize("pattern", ["rggb", "bggr", "gbrg", "grbg"])
def test_bayer_cells(pattern: str) -> None:
    values = {"r": 200, "b": 50}
    greens = iter([100, 120])
    cell = [values[c] if c in values else next(greens) for c in pattern]
    pixels = np.array([cell[:2], cell[2:]], dtype=np.uint8)
    out = conversions.image_msg_to_rgb(raw(f"bayer_{pattern}8", pixels, 2, 2))
    assert out.shape == (2, 2, 3)
    assert (out == np.array([200, 110, 50], np.uint8)).all()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: setattr(m, "encoding", "weird16"), "unsupported encoding 'weird16'"),
        (lambda m: (setattr(m, "width", 0), setattr(m, "height", 0)), "no pixels (0x0)"),
        (lambda m: setattr(m, "step", 5), "step 5 is smaller than width 10"),
        (lambda m: setattr(m, "data", bytes(10)), "data has 10 bytes, expected step × height"),
    ],
)
def test_bad_raw_images_are_refused_with_the_reason(mutate, message: str) -> None:
    msg = raw("rgb8", RGB, 10, 6)
    mutate(msg)
    assert message in conversions.raw_image_problem(msg)
    with pytest.raises(ImageConversionError, match=re.escape(message)):
        conversions.image_msg_to_rgb(msg)
    with pytest.raises(ImageConversionError):
        conversions.image_sample(msg, STAMP_NS)  # refused at once, in the callback


def test_image_sample_checks_now_and_converts_later() -> None:
    msg = raw("bgr8", RGB[:, :, ::-1], 10, 6)
    sample = conversions.image_sample(msg, receive_ns=STAMP_NS + 5)
    assert (sample.stamp_ns, sample.receive_ns, sample.frame_id) == (STAMP_NS, STAMP_NS + 5, "cam_optical")
    assert not sample.image.decoded
    np.testing.assert_array_equal(sample.image.get(), RGB)
    msg.header.frame_id = ""
    assert conversions.image_sample(msg, 0, frame_id="front_optical").frame_id == "front_optical"
    msg.header.stamp = conversions.ns_to_stamp(0)
    with pytest.raises(InputError, match=r"header\.stamp 0"):
        conversions.image_sample(msg, 0)


def test_rgb_to_image_msg_round_trip() -> None:
    msg = over_dds(conversions.rgb_to_image_msg(RGB, STAMP_NS, "cam"))
    assert (msg.encoding, msg.width, msg.height, msg.step) == ("rgb8", 10, 6, 30)
    assert conversions.stamp_to_ns(msg.header.stamp) == STAMP_NS
    np.testing.assert_array_equal(conversions.image_msg_to_rgb(msg), RGB)


# --- compressed images -----------------------------------------------------------------------------------


def compressed(data: bytes, fmt: str = "jpeg") -> CompressedImage:
    msg = CompressedImage()
    msg.header.stamp = conversions.ns_to_stamp(STAMP_NS)
    msg.header.frame_id = "cam_optical"
    msg.format = fmt
    msg.data = data
    return over_dds(msg)


def encoded(array: np.ndarray, fmt: str, mode: str | None = None, **kwargs) -> bytes:
    buffer = io.BytesIO()
    (PILImage.fromarray(array, mode) if mode else PILImage.fromarray(array)).save(buffer, fmt, **kwargs)
    return buffer.getvalue()


_U, _V = np.meshgrid(np.linspace(0, 255, 64), np.linspace(40, 200, 48))
SMOOTH = np.dstack([_U, _V, np.full((48, 64), 90.0)]).astype(np.uint8)


@pytest.mark.parametrize("fmt", ["jpeg", "bgr8; jpeg compressed bgr8", "rgb8; jpeg compressed rgb8", ""])
def test_jpeg_decodes_whatever_the_format_string(fmt: str) -> None:
    out = conversions.compressed_msg_to_rgb(compressed(encoded(SMOOTH, "JPEG", quality=95), fmt))
    assert out.shape == SMOOTH.shape
    assert np.abs(out.astype(int) - SMOOTH.astype(int)).mean() < 3


def test_png_variants_decode_exactly() -> None:
    np.testing.assert_array_equal(conversions.compressed_msg_to_rgb(compressed(encoded(RGB, "PNG"), "png")), RGB)
    grey = RGB[:, :, 0]
    out = conversions.compressed_msg_to_rgb(compressed(encoded(grey, "PNG"), "mono8; png compressed mono8"))
    np.testing.assert_array_equal(out[:, :, 2], grey)
    rgba = np.dstack([RGB, np.full((6, 10), 255, np.uint8)])
    np.testing.assert_array_equal(conversions.compressed_msg_to_rgb(compressed(encoded(rgba, "PNG"), "png")), RGB)
    deep = RNG.integers(0, 65536, size=(6, 10), dtype=np.uint16)
    out = conversions.compressed_msg_to_rgb(compressed(encoded(deep, "PNG"), "mono16; png compressed mono16"))
    np.testing.assert_array_equal(out[:, :, 0], (deep >> 8).astype(np.uint8))


@pytest.mark.parametrize(
    ("data", "fmt", "message"),
    [
        (b"", "jpeg", "no data"),
        (b"hello world, not an image", "jpeg", "neither JPEG nor PNG"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "png", "corrupt PNG"),
        (b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4, "jpeg", "corrupt JPEG"),
        (b"\x89PNG\r\n\x1a\n", "16UC1; compressedDepth", "compressedDepth"),
    ],
)
def test_corrupt_compressed_images_are_refused(data: bytes, fmt: str, message: str) -> None:
    msg = compressed(data, fmt)
    with pytest.raises(ImageConversionError, match=message):
        conversions.compressed_msg_to_rgb(msg)


def test_truncated_jpeg_is_refused_when_decoded() -> None:
    data = encoded(SMOOTH, "JPEG", quality=90)
    msg = compressed(data[: len(data) // 2])
    sample = conversions.compressed_image_sample(msg, STAMP_NS)  # header looks fine: accepted
    with pytest.raises(InputError, match="corrupt JPEG"):
        sample.image.get()  # ... and refused by the worker's decode


# --- camera info, telemetry, commands ---------------------------------------------------------------------


def camera_info(k, width=640, height=360, binning=(0, 0)) -> CameraInfo:
    msg = CameraInfo()
    msg.width, msg.height = width, height
    msg.k = [float(v) for v in k]
    msg.binning_x, msg.binning_y = binning
    return over_dds(msg)


def test_camera_info_intrinsics() -> None:
    intrinsics = conversions.camera_info_intrinsics(camera_info([500, 0, 320, 0, 505, 180, 0, 0, 1]))
    assert (intrinsics.fx, intrinsics.fy, intrinsics.cx, intrinsics.cy) == (500, 505, 320, 180)
    assert (intrinsics.width, intrinsics.height, intrinsics.source) == (640, 360, "camera_info")
    binned = conversions.camera_info_intrinsics(camera_info([500, 0, 320, 0, 500, 180, 0, 0, 1], binning=(2, 2)))
    assert (binned.fx, binned.cx, binned.width) == (250, 160, 320)
    assert conversions.camera_info_intrinsics(camera_info([0] * 9)) is None  # uncalibrated
    with pytest.raises(InputError, match="non-finite"):
        conversions.camera_info_intrinsics(camera_info([math.nan, 0, 320, 0, 500, 180, 0, 0, 1]))


def odometry(vx: float, vy: float = 0.0, wz: float = 0.0, stamp_ns: int = STAMP_NS) -> Odometry:
    msg = Odometry()
    msg.header.stamp = conversions.ns_to_stamp(stamp_ns)
    msg.child_frame_id = "base_link"
    msg.twist.twist.linear.x, msg.twist.twist.linear.y, msg.twist.twist.angular.z = vx, vy, wz
    return over_dds(msg)


def test_odometry_and_acceleration_samples() -> None:
    sample = conversions.odometry_sample(odometry(4.66, -0.09, 0.1), receive_ns=STAMP_NS + 1)
    assert (sample.stamp_ns, sample.vx, sample.vy, sample.yaw_rate) == (STAMP_NS, 4.66, -0.09, 0.1)
    for bad in (odometry(math.nan), odometry(1.0, math.inf), odometry(1.0, 0.0, math.nan)):
        with pytest.raises(InputError, match="odometry twist is not finite"):
            conversions.odometry_sample(bad, STAMP_NS)
    with pytest.raises(InputError, match="stamp 0"):
        conversions.odometry_sample(odometry(1.0, stamp_ns=0), STAMP_NS)
    accel = AccelWithCovarianceStamped()
    accel.header.stamp = conversions.ns_to_stamp(STAMP_NS)
    accel.accel.accel.linear.x, accel.accel.accel.linear.y = 0.17, -1.53
    assert (conversions.acceleration_sample(over_dds(accel), 0).ax, conversions.acceleration_sample(accel, 0).ay) == (
        0.17,
        -1.53,
    )
    accel.accel.accel.linear.x = math.nan
    with pytest.raises(InputError, match="acceleration is not finite"):
        conversions.acceleration_sample(accel, 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("left", "left"), ("  Straight\n", "straight"), ("RIGHT", "right"), ("unknown", "unknown")],
)
def test_string_commands(text: str, expected: str) -> None:
    sample = conversions.command_from_string(String(data=text), receive_ns=STAMP_NS)
    assert sample.command is NavigationCommand(expected)
    assert sample.stamp_ns == STAMP_NS


def test_unknown_string_command_is_refused() -> None:
    with pytest.raises(InputError, match="unknown navigation command 'lfet'"):
        conversions.command_from_string(String(data="lfet"), STAMP_NS)


def test_driving_command_message() -> None:
    from wam_diff2_ros.ros.outputs import own_messages

    msgs, problem = own_messages()
    if msgs is None:
        pytest.skip(problem)
    msg = msgs.DrivingCommand(command=msgs.DrivingCommand.RIGHT)
    msg.header.stamp = conversions.ns_to_stamp(STAMP_NS - 10)
    sample = conversions.command_from_driving_command(over_dds(msg), STAMP_NS)
    assert sample.command is NavigationCommand.RIGHT and sample.stamp_ns == STAMP_NS - 10
    unstamped = conversions.command_from_driving_command(msgs.DrivingCommand(command=3), STAMP_NS)
    assert unstamped.command is NavigationCommand.UNKNOWN and unstamped.stamp_ns == STAMP_NS
    with pytest.raises(InputError, match=r"not one of 0\.\.3"):
        conversions.command_from_driving_command(msgs.DrivingCommand(command=7), STAMP_NS)


def test_time_conversions() -> None:
    stamp = conversions.ns_to_stamp(STAMP_NS)
    assert (stamp.sec, stamp.nanosec) == (1_700_000_123, 456_789_000)
    assert conversions.stamp_to_ns(stamp) == STAMP_NS
    duration = conversions.ns_to_duration(2_500_000_000)
    assert (duration.sec, duration.nanosec) == (2, 500_000_000)
