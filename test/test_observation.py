"""core.observation: intrinsics, the acceleration filter and the observation assembler (no ROS)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wam_diff2_ros.core.acceleration import AccelerationFilterConfig, derive_acceleration
from wam_diff2_ros.core.camera import OPTICAL_IN_BODY, CameraIntrinsics, optical_rotation, rotation_matrix
from wam_diff2_ros.core.observation import ObservationBuffer, SyncConfig
from wam_diff2_ros.core.prompts import NavigationCommand
from wam_diff2_ros.core.samples import (
    AccelerationSample,
    CommandSample,
    ImageSample,
    InputError,
    LazyImage,
    OdometrySample,
)
from wam_diff2_ros.core.units import NS_PER_MS, NS_PER_S

pytestmark = pytest.mark.core  # no ROS (the sample drive's simulator included): runs on 4.57.3 too

T0 = 1_700_000_000 * NS_PER_S


def ms(value: float) -> int:
    return round(value * NS_PER_MS)


def frame(stamp_ns: int, width: int = 64, height: int = 48, value: int = 0, frame_id: str = "cam") -> ImageSample:
    image = np.full((height, width, 3), value, dtype=np.uint8)
    return ImageSample(stamp_ns=stamp_ns, receive_ns=stamp_ns, frame_id=frame_id, image=LazyImage.of(image))


def odometry_track(end_ns: int, seconds: float = 1.0, rate_hz: float = 50.0, vx=lambda t: 5.0, yaw_rate=0.0):
    count = int(seconds * rate_hz)
    samples = []
    for k in range(count + 1):
        stamp = end_ns - round((count - k) / rate_hz * NS_PER_S)
        t = (stamp - T0) / NS_PER_S
        samples.append(OdometrySample(stamp, stamp, float(vx(t)), 0.0, yaw_rate))
    return samples


def ready_buffer(cameras=("front",), sync: SyncConfig | None = None, stamp: int = T0, **kwargs) -> ObservationBuffer:
    """A buffer with a fresh front frame at ``stamp``, 1 s of odometry ending there and a command."""
    buffer = ObservationBuffer(cameras, sync or SyncConfig(), **kwargs)
    for index in range(len(cameras)):
        buffer.add_image(index, frame(stamp, value=index))
    for sample in odometry_track(stamp):
        buffer.add_odometry(sample)
    buffer.add_command(CommandSample(NavigationCommand.LEFT, stamp - ms(200), stamp - ms(200)))
    return buffer


def problem_inputs(result) -> list[str]:
    return [p.input for p in result.problems]


# --- intrinsics ---------------------------------------------------------------------------------------


def test_a_cameras_optical_frame_in_base_link() -> None:
    def matrix(q) -> np.ndarray:
        x, y, z, w = q
        return np.array([
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ])  # fmt: skip

    level = matrix(optical_rotation(0.0, 0.0, 0.0))
    np.testing.assert_allclose(level @ [0, 0, 1], [1, 0, 0], atol=1e-12)  # optical z (forward) = base x
    np.testing.assert_allclose(level @ [1, 0, 0], [0, -1, 0], atol=1e-12)  # optical x (right) = base -y
    np.testing.assert_allclose(matrix(optical_rotation(0.0, 0.0, math.pi / 2)) @ [0, 0, 1], [0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(matrix(optical_rotation(0.0, 0.1, 0.0)) @ [0, 0, 1], [math.cos(0.1), 0, -math.sin(0.1)])
    for roll, pitch, yaw in np.random.default_rng(0).uniform(-3, 3, size=(20, 3)):
        expected = rotation_matrix(roll, pitch, yaw) @ OPTICAL_IN_BODY
        np.testing.assert_allclose(matrix(optical_rotation(roll, pitch, yaw)), expected, atol=1e-12)


def test_fallback_pinhole_follows_the_field_of_view() -> None:
    intrinsics = CameraIntrinsics.pinhole_fallback(640, 360, 90.0)
    # 90° horizontal FOV: the image edge is at 45°, so fx = half the width.
    assert intrinsics.fx == pytest.approx(320.0)
    assert intrinsics.fy == pytest.approx(320.0)
    assert (intrinsics.cx, intrinsics.cy) == (320.0, 180.0)
    assert intrinsics.source == "fallback"
    x, y, z = intrinsics.back_project(640.0, 180.0, 10.0)  # right edge, centre row
    assert math.degrees(math.atan2(x, z)) == pytest.approx(45.0)
    assert y == pytest.approx(0.0)


def test_back_project_and_project_are_inverse() -> None:
    intrinsics = CameraIntrinsics(500.0, 510.0, 310.0, 170.0, 640, 360)
    for u, v in [(0.0, 0.0), (639.0, 359.0), (123.4, 56.7)]:
        point = intrinsics.back_project(u, v, 7.5)
        assert point[2] == 7.5
        assert intrinsics.project(*point) == pytest.approx((u, v))
    assert intrinsics.project(1.0, 0.0, -1.0) is None


def test_intrinsics_scale_with_the_image_size() -> None:
    intrinsics = CameraIntrinsics(1000.0, 1000.0, 960.0, 540.0, 1920, 1080)
    half = intrinsics.scaled_to(960, 540)
    assert (half.fx, half.fy, half.cx, half.cy) == (500.0, 500.0, 480.0, 270.0)
    assert intrinsics.scaled_to(1920, 1080) is intrinsics


@pytest.mark.parametrize("fx", [0.0, -1.0, float("nan")])
def test_bad_intrinsics_are_refused(fx: float) -> None:
    with pytest.raises(InputError):
        CameraIntrinsics(fx, 100.0, 50.0, 50.0, 100, 100)


# --- samples ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["vx", "vy", "yaw_rate"])
def test_odometry_sample_refuses_non_finite_values(field: str) -> None:
    values = {"vx": 1.0, "vy": 0.0, "yaw_rate": 0.0, field: float("nan")}
    with pytest.raises(InputError, match="non-finite"):
        OdometrySample(T0, T0, **values)
    with pytest.raises(InputError):
        AccelerationSample(T0, T0, float("inf"), 0.0)


def test_lazy_image_decodes_once_and_keeps_the_error() -> None:
    calls = []

    def load():
        calls.append(1)
        raise OSError("truncated")

    lazy = LazyImage(load)
    assert not lazy.decoded
    for _ in range(2):
        with pytest.raises(InputError, match="OSError: truncated"):
            lazy.get()
    assert calls == [1]
    with pytest.raises(InputError, match="not HxWx3"):
        LazyImage(lambda: np.zeros((4, 4), np.uint8)).get()


# --- acceleration filter ------------------------------------------------------------------------------


def test_derived_acceleration_of_a_constant_acceleration_is_exact() -> None:
    samples = odometry_track(T0, vx=lambda t: 3.0 + 1.5 * (t - (T0 / NS_PER_S)))
    ax, ay = derive_acceleration(samples, T0, AccelerationFilterConfig())
    assert ax == pytest.approx(1.5, abs=1e-6)
    assert ay == pytest.approx(0.0, abs=1e-9)


def test_centripetal_term_is_yaw_rate_times_speed() -> None:
    samples = odometry_track(T0, vx=lambda t: 6.0, yaw_rate=0.25)
    ax, ay = derive_acceleration(samples, T0, AccelerationFilterConfig())
    assert (ax, ay) == pytest.approx((0.0, 1.5))
    _, ay_body = derive_acceleration(samples, T0, AccelerationFilterConfig(include_centripetal=False))
    assert ay_body == pytest.approx(0.0, abs=1e-9)


def test_derived_acceleration_matches_the_sample_drive_ground_truth() -> None:
    """The synthetic drive's odometry (speed, yaw rate) against its true longitudinal/lateral acceleration."""
    from wam_diff2_ros.sim import simulate_drive

    track = simulate_drive(25.0, seed=0)
    samples = [
        OdometrySample(int(t), int(t), float(v), 0.0, float(w))
        for t, v, w in zip(track.stamps_ns, track.speed, track.yaw_rate, strict=True)
    ]
    config = AccelerationFilterConfig(window_s=0.4)
    lag = round(0.2 * 50)  # the estimate refers to the middle of the 0.4 s window (50 Hz odometry)
    errors = []
    for i in range(30, len(samples), 5):
        ax, ay = derive_acceleration(samples[: i + 1], samples[i].stamp_ns, config)
        errors.append((ax - track.accel_x[i - lag], ay - track.accel_y[i - lag]))
    errors = np.abs(np.array(errors))
    assert errors.max() < 0.06
    assert np.abs(track.accel_y).max() > 0.8  # the drive has a real turn, so the lateral check means something


def test_derived_acceleration_needs_enough_history() -> None:
    samples = odometry_track(T0, seconds=0.04)  # 3 samples over 40 ms
    with pytest.raises(InputError, match="not enough odometry history"):
        derive_acceleration(samples, T0, AccelerationFilterConfig(min_span_s=0.1))
    with pytest.raises(ValueError):
        AccelerationFilterConfig(window_s=0.1, min_span_s=0.2)


# --- assembly -----------------------------------------------------------------------------------------


def test_fresh_inputs_assemble_into_an_observation() -> None:
    buffer = ready_buffer(cameras=("front", "left"))
    result = buffer.assemble(T0 + ms(80))
    assert result.problems == ()
    observation = result.observation
    assert observation is not None
    assert observation.stamp_ns == T0
    assert [f.camera for f in observation.frames] == ["front", "left"]
    assert [int(img[0, 0, 0]) for img in observation.images] == [0, 1]  # camera list order
    assert observation.command is NavigationCommand.LEFT and observation.command_source == "topic"
    assert observation.velocity == (5.0, 0.0)
    assert observation.acceleration == pytest.approx((0.0, 0.0), abs=1e-9)
    assert observation.acceleration_source == "odometry"
    assert observation.front.intrinsics.source == "fallback"


def test_missing_and_stale_front_image_block_planning() -> None:
    buffer = ObservationBuffer(["front"])
    result = buffer.assemble(T0)
    assert result.observation is None and problem_inputs(result) == ["image_0 (front)"]
    assert "no image received" in result.problems[0].reason

    buffer = ready_buffer(sync=SyncConfig(max_image_age_ms=300))
    stale = buffer.assemble(T0 + ms(301))
    assert stale.observation is None
    assert "301 ms old (limit 300 ms)" in stale.problems[0].reason
    future = buffer.assemble(T0 - ms(400))
    assert "in the future" in future.problems[0].reason
    assert buffer.assemble(T0 + ms(299)).observation is not None


def _two_camera_buffer(left_stamps: list[int], max_skew_ms: float) -> ObservationBuffer:
    buffer = ObservationBuffer(["front", "left"], SyncConfig(max_skew_ms=max_skew_ms))
    buffer.add_image(0, frame(T0))
    for stamp in left_stamps:
        buffer.add_image(1, frame(stamp, value=(stamp - T0) // NS_PER_MS % 256))
    for sample in odometry_track(T0):
        buffer.add_odometry(sample)
    buffer.add_command(CommandSample(NavigationCommand.STRAIGHT, T0, T0))
    return buffer


def test_camera_skew_is_checked_on_the_nearest_frame() -> None:
    # The left camera's newest frame is 60 ms after the front one; an older one 20 ms before it matches.
    buffer = _two_camera_buffer([T0 - ms(120), T0 - ms(20), T0 + ms(60)], max_skew_ms=30)
    observation = buffer.assemble(T0 + ms(70)).observation
    assert observation is not None
    assert observation.frames[1].stamp_ns == T0 - ms(20)

    skewed = _two_camera_buffer([T0 - ms(45)], max_skew_ms=30)
    result = skewed.assemble(T0)
    assert problem_inputs(result) == ["image_1 (left)"]
    assert "-45 ms from the front image (limit ±30 ms)" in result.problems[0].reason
    assert problem_inputs(_two_camera_buffer([], 30).assemble(T0)) == ["image_1 (left)"]


def test_assembly_holds_only_the_chosen_cameras_and_never_waits_for_the_others() -> None:
    buffer = _two_camera_buffer([], max_skew_ms=30)  # the left camera never sent a frame
    assert problem_inputs(buffer.assemble(T0)) == ["image_1 (left)"]
    observation = buffer.assemble(T0, cameras=[0]).observation
    assert observation is not None and [f.camera for f in observation.frames] == ["front"]

    three = ready_buffer(cameras=("front", "left", "right"))
    observation = three.assemble(T0 + ms(80), cameras=[0, 2, 1]).observation
    assert observation is not None and [f.camera for f in observation.frames] == ["front", "right", "left"]
    for bad in ([1, 0], [0, 0], []):
        with pytest.raises(ValueError, match="starting with the front camera 0"):
            three.assemble(T0, cameras=bad)


def test_stale_or_missing_odometry_blocks_planning() -> None:
    buffer = ObservationBuffer(["front"], SyncConfig(max_age_ms=100))
    buffer.add_image(0, frame(T0))
    buffer.add_command(CommandSample(NavigationCommand.RIGHT, T0, T0))
    result = buffer.assemble(T0)
    assert problem_inputs(result) == ["odometry"]
    for sample in odometry_track(T0 - ms(500)):  # odometry stopped 500 ms before the image
        buffer.add_odometry(sample)
    result = buffer.assemble(T0 + ms(10))
    assert problem_inputs(result) == ["odometry"]
    assert "-500 ms from the front image" in result.problems[0].reason


def test_acceleration_topic_is_used_when_fresh_and_derived_otherwise() -> None:
    buffer = ready_buffer()
    buffer.add_acceleration(AccelerationSample(T0 - ms(30), T0, 0.7, -0.2))
    observation = buffer.assemble(T0).observation
    assert observation.acceleration == (0.7, -0.2) and observation.acceleration_source == "topic"

    stale = ready_buffer()
    stale.add_acceleration(AccelerationSample(T0 - ms(900), T0, 0.7, -0.2))
    observation = stale.assemble(T0).observation
    assert observation.acceleration_source == "odometry"

    strict = ready_buffer(sync=SyncConfig(acceleration_source="topic"))
    result = strict.assemble(T0)
    assert problem_inputs(result) == ["acceleration"] and "no acceleration received" in result.problems[0].reason

    derived_only = ready_buffer(sync=SyncConfig(acceleration_source="odometry"))
    derived_only.add_acceleration(AccelerationSample(T0, T0, 3.0, 3.0))
    assert derived_only.assemble(T0).observation.acceleration_source == "odometry"


def test_command_policy() -> None:
    buffer = ObservationBuffer(["front"])
    buffer.add_image(0, frame(T0))
    for sample in odometry_track(T0):
        buffer.add_odometry(sample)
    result = buffer.assemble(T0)
    assert problem_inputs(result) == ["command"] and "command.default" in result.problems[0].reason

    with_default = ObservationBuffer(["front"], SyncConfig(default_command=NavigationCommand.UNKNOWN))
    with_default.add_image(0, frame(T0))
    for sample in odometry_track(T0):
        with_default.add_odometry(sample)
    observation = with_default.assemble(T0).observation
    assert observation.command is NavigationCommand.UNKNOWN and observation.command_source == "default"

    expiring = ready_buffer(sync=SyncConfig(command_max_age_s=0.1))  # the command is 200 ms old
    result = expiring.assemble(T0)
    assert problem_inputs(result) == ["command"] and "0.2 s old (limit 0.1 s)" in result.problems[0].reason


def test_the_same_front_frame_is_not_planned_twice() -> None:
    buffer = ready_buffer()
    first = buffer.assemble(T0, after_stamp_ns=None)
    assert first.observation is not None
    again = buffer.assemble(T0 + ms(10), after_stamp_ns=T0)
    assert again.observation is None and again.idle and again.problems == ()
    # ... unless it went stale meanwhile: then that is reported.
    stale = buffer.assemble(T0 + ms(900), after_stamp_ns=T0)
    assert not stale.idle and problem_inputs(stale) == ["image_0 (front)"]


def test_an_undecodable_frame_is_reported_and_dropped() -> None:
    buffer = ready_buffer()

    def broken():
        raise ValueError("corrupt JPEG data")

    buffer.add_image(0, ImageSample(T0 + ms(40), T0, "cam", LazyImage(broken)))
    result = buffer.assemble(T0 + ms(50))
    assert problem_inputs(result) == ["image_0 (front)"]
    assert "corrupt JPEG data" in result.problems[0].reason
    # The bad frame is gone; the previous good one (still fresh) is used next time.
    observation = buffer.assemble(T0 + ms(60)).observation
    assert observation is not None and observation.stamp_ns == T0


def test_time_going_back_clears_the_history() -> None:
    buffer = ready_buffer()
    earlier = T0 - 60 * NS_PER_S  # a bag restarted from its beginning
    buffer.add_image(0, frame(earlier))
    for sample in odometry_track(earlier):
        buffer.add_odometry(sample)
    observation = buffer.assemble(earlier + ms(20), after_stamp_ns=T0).observation  # T0 was planned on before
    assert observation is not None and observation.stamp_ns == earlier
    assert buffer.latest_stamp(0) == earlier


def test_camera_info_intrinsics_are_used_and_scaled() -> None:
    buffer = ready_buffer()
    buffer.set_intrinsics(0, CameraIntrinsics(200.0, 200.0, 64.0, 48.0, 128, 96))  # calibrated at 2x size
    intrinsics = buffer.assemble(T0).observation.front.intrinsics
    assert intrinsics.source == "camera_info"
    assert (intrinsics.fx, intrinsics.cx, intrinsics.width) == (100.0, 32.0, 64)


def test_latest_frames_for_detection_and_questions() -> None:
    buffer = ready_buffer(cameras=("front", "left"))
    frames, problems = buffer.latest_frames([1, 0], T0 + ms(100))
    assert [f.camera for f in frames] == ["left", "front"] and problems == []
    frames, problems = buffer.latest_frames([0], T0 + ms(5000))
    assert frames == [] and "old" in problems[0].reason


def test_input_ages_name_every_input() -> None:
    buffer = ready_buffer()
    ages = buffer.input_ages_ms(T0 + ms(250))
    assert ages["image_0 (front)"] == pytest.approx(250.0)
    assert ages["acceleration"] is None
    assert ages["command"] == pytest.approx(450.0)
    buffer.clear()
    assert all(age is None for age in buffer.input_ages_ms(T0).values())
