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

from wam_diff2_ros.core.image_headers import jpeg_header, png_header
from wam_diff2_ros.core.prompts import NavigationCommand
from wam_diff2_ros.core.samples import InputError
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


# --- raw encodings: against OpenCV (cv_bridge's table), and cv_bridge itself where it is installed ---------

cv2 = pytest.importorskip("cv2", reason="OpenCV is not importable (pip install opencv-python-headless)")

HEIGHT, WIDTH = 1080, 1920
# cv_bridge.cpp getConversionCodes(), source → rgb8, restated here as OpenCV calls (what cv_bridge runs).
REFERENCE_CODES = {
    "rgb8": None,
    "bgr8": cv2.COLOR_BGR2RGB,
    "rgba8": cv2.COLOR_RGBA2RGB,
    "bgra8": cv2.COLOR_BGRA2RGB,
    "mono8": cv2.COLOR_GRAY2RGB,
    "rgb16": None,
    "bgr16": cv2.COLOR_BGR2RGB,
    "rgba16": cv2.COLOR_RGBA2RGB,
    "bgra16": cv2.COLOR_BGRA2RGB,
    "mono16": cv2.COLOR_GRAY2RGB,
    "yuv422": cv2.COLOR_YUV2RGB_UYVY,
    "uyvy": cv2.COLOR_YUV2RGB_UYVY,
    "yuv422_yuy2": cv2.COLOR_YUV2RGB_YUY2,
    "yuyv": cv2.COLOR_YUV2RGB_YUY2,
    "bayer_rggb8": cv2.COLOR_BayerBG2RGB,
    "bayer_bggr8": cv2.COLOR_BayerRG2RGB,
    "bayer_gbrg8": cv2.COLOR_BayerGR2RGB,
    "bayer_grbg8": cv2.COLOR_BayerGB2RGB,
    "bayer_rggb16": cv2.COLOR_BayerBG2RGB,
    "bayer_bggr16": cv2.COLOR_BayerRG2RGB,
    "bayer_gbrg16": cv2.COLOR_BayerGR2RGB,
    "bayer_grbg16": cv2.COLOR_BayerGB2RGB,
    # OpenCV type names: OpenCV's own layouts (grey, BGR, BGRA).
    "8UC1": cv2.COLOR_GRAY2RGB,
    "8UC3": cv2.COLOR_BGR2RGB,
    "8UC4": cv2.COLOR_BGRA2RGB,
    "16UC1": cv2.COLOR_GRAY2RGB,
    "16UC3": cv2.COLOR_BGR2RGB,
    "16UC4": cv2.COLOR_BGRA2RGB,
}


def layout(encoding: str) -> tuple[int, int]:
    """(channels, bytes per value) of an encoding, from its name."""
    if encoding[0].isdigit():
        bits, count = encoding.split("UC")
        return int(count), int(bits) // 8
    depth = 2 if encoding.endswith("16") else 1
    if encoding.startswith(("mono", "bayer")):
        return 1, depth
    if encoding.startswith(("yuv", "uyvy", "yuyv")):
        return 2, 1
    return (4 if encoding[3] == "a" else 3), depth


def reference_rgb(encoding: str, values: np.ndarray) -> np.ndarray:
    """What cv_bridge's toCvCopy(msg, "rgb8") computes: cvtColor at the source depth, then for 16 bit
    Mat::convertTo(CV_8U, 255/65535) (convertScaleAbs is the same for unsigned input)."""
    code = REFERENCE_CODES[encoding]
    image = values if code is None else cv2.cvtColor(values, code)
    if image.dtype == np.uint16:
        image = cv2.convertScaleAbs(image, alpha=255.0 / 65535.0)
    return image


def random_values(encoding: str, height: int, width: int, seed: int = 0) -> np.ndarray:
    channels, depth = layout(encoding)
    dtype = np.uint16 if depth == 2 else np.uint8
    shape = (height, width) if channels == 1 else (height, width, channels)
    return np.random.default_rng(seed).integers(0, np.iinfo(dtype).max + 1, size=shape, dtype=dtype)


def test_the_table_covers_every_supported_encoding() -> None:
    assert set(REFERENCE_CODES) | {"nv21", "nv24"} == set(conversions.SUPPORTED_ENCODINGS)


@pytest.mark.parametrize("encoding", sorted(REFERENCE_CODES))
def test_1080p_conversion_is_identical_to_opencv(encoding: str) -> None:
    values = random_values(encoding, HEIGHT, WIDTH)
    out = conversions.image_msg_to_rgb(raw(encoding, values, WIDTH, HEIGHT))
    assert out.dtype == np.uint8 and out.shape == (HEIGHT, WIDTH, 3) and out.flags.c_contiguous
    np.testing.assert_array_equal(out, reference_rgb(encoding, values))


@pytest.mark.parametrize("encoding", ["mono16", "rgb16", "bgra16", "bayer_gbrg16", "16UC3", "bgr8", "yuv422"])
@pytest.mark.parametrize(("padding", "big"), [(6, False), (0, True), (10, True)])
def test_row_padding_and_byte_order(encoding: str, padding: int, big: bool) -> None:
    values = random_values(encoding, 6, 10, seed=1)
    if big and values.dtype != np.uint16:
        pytest.skip("byte order only matters for 16-bit encodings")
    channels, depth = layout(encoding)
    stored = values.astype(">u2") if big else values
    msg = raw(encoding, stored, 10, 6, step=10 * channels * depth + padding, big=big)
    np.testing.assert_array_equal(conversions.image_msg_to_rgb(msg), reference_rgb(encoding, values))


def test_16_bit_is_scaled_as_cv_bridge_does_not_cut_to_the_high_byte() -> None:
    values = np.arange(65536, dtype=np.uint16).reshape(256, 256)
    out = conversions.image_msg_to_rgb(raw("mono16", values, 256, 256))[:, :, 0]
    np.testing.assert_array_equal(out, ((values.astype(np.int64) * 2 + 257) // 514).astype(np.uint8))  # round(v/257)
    assert out.ravel()[128] == 0 and out.ravel()[129] == 1 and out.ravel()[65535] == 255


def test_bgr8_and_rgb8_round_trip_the_pixels() -> None:
    np.testing.assert_array_equal(conversions.image_msg_to_rgb(raw("bgr8", RGB[:, :, ::-1], 10, 6)), RGB)
    out = conversions.image_msg_to_rgb(raw("rgb8", RGB, 10, 6))
    np.testing.assert_array_equal(out, RGB)
    assert out.flags.writeable  # a new array, not a view of msg.data


def semi_planar(encoding: str, planes: np.ndarray, width: int, height: int) -> Image:
    """An NV21/NV24 message: the planes' bytes as they are, step = width (the Y row)."""
    msg = Image()
    msg.header.stamp = conversions.ns_to_stamp(STAMP_NS)
    msg.height, msg.width, msg.encoding, msg.step = height, width, encoding, width
    msg.data = planes.tobytes()
    return over_dds(msg)


def nv21_of(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """NV21 bytes: the Y plane, then V U interleaved at half resolution."""
    return np.vstack([y, np.dstack([v, u]).reshape(v.shape[0], -1)])


def test_nv21_is_opencvs_conversion_and_nv24_agrees_with_it() -> None:
    rng = np.random.default_rng(2)
    y = rng.integers(0, 256, size=(HEIGHT, WIDTH), dtype=np.uint8)
    u, v = (rng.integers(0, 256, size=(HEIGHT // 2, WIDTH // 2), dtype=np.uint8) for _ in range(2))
    packed = nv21_of(y, u, v)
    expected = cv2.cvtColor(packed, cv2.COLOR_YUV2RGB_NV21)
    np.testing.assert_array_equal(conversions.image_msg_to_rgb(semi_planar("nv21", packed, WIDTH, HEIGHT)), expected)
    # NV24 (full-resolution U V) carrying the same chroma, repeated over each 2x2 cell: the same pixels.
    full_u, full_v = (np.repeat(np.repeat(c, 2, axis=0), 2, axis=1) for c in (u, v))
    nv24 = np.concatenate([y.ravel(), np.dstack([full_u, full_v]).ravel()])
    np.testing.assert_array_equal(conversions.image_msg_to_rgb(semi_planar("nv24", nv24, WIDTH, HEIGHT)), expected)
    with pytest.raises(ImageConversionError, match="even width and height"):
        conversions.image_msg_to_rgb(semi_planar("nv21", packed[:-1, :-1], WIDTH - 1, HEIGHT - 1))


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
def test_bayer_patterns_put_red_and_blue_where_the_name_says(pattern: str) -> None:
    # A flat scene (R 200, G 110, B 50) seen through the pattern demosaics to that colour inside the image.
    colour = {"r": 200, "g": 110, "b": 50}
    cell = np.array([[colour[pattern[0]], colour[pattern[1]]], [colour[pattern[2]], colour[pattern[3]]]], np.uint8)
    pixels = np.tile(cell, (4, 4))
    out = conversions.image_msg_to_rgb(raw(f"bayer_{pattern}8", pixels, 8, 8))
    assert (out[2:6, 2:6] == np.array([200, 110, 50], np.uint8)).all()


def test_cv_bridge_gives_the_same_pixels_where_installed() -> None:
    cv_bridge = pytest.importorskip("cv_bridge", reason="cv_bridge comes from apt (ROS install), not PyPI")
    bridge = cv_bridge.CvBridge()
    for encoding in sorted(REFERENCE_CODES):
        if encoding[0].isdigit():
            continue  # cv_bridge refuses to colour-convert OpenCV type names
        msg = raw(encoding, random_values(encoding, 48, 64, seed=3), 64, 48)
        np.testing.assert_array_equal(conversions.image_msg_to_rgb(msg), bridge.imgmsg_to_cv2(msg, "rgb8"), encoding)
    payload = encoded(SMOOTH, "JPEG", quality=90)
    msg = compressed(payload)
    np.testing.assert_array_equal(conversions.compressed_msg_to_rgb(msg), bridge.compressed_imgmsg_to_cv2(msg, "rgb8"))


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
    np.testing.assert_array_equal(out[:, :, 0], cv2.convertScaleAbs(deep, alpha=255.0 / 65535.0))


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


@pytest.mark.parametrize("ext", [".jpg", ".png"])
def test_size_is_read_from_the_header_and_huge_images_are_not_decoded(ext: str, monkeypatch) -> None:
    ok, payload = cv2.imencode(ext, SMOOTH)
    assert ok
    data = payload.tobytes()
    read_header = jpeg_header if ext == ".jpg" else png_header  # the one header reader conversions uses
    assert read_header(data) == (64, 48)
    monkeypatch.setattr(conversions, "MAX_IMAGE_PIXELS", 64 * 48 - 1)
    with pytest.raises(ImageConversionError, match="64x48 exceeds 3071 pixels"):
        conversions.compressed_msg_to_rgb(compressed(data, ext[1:]))


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
