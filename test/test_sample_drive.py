"""The synthetic sample drive: ground truth, rendering, and the rosbag2 MCAP it writes."""

from __future__ import annotations

import io
import math
import time

import numpy as np
import pytest
from PIL import Image

from wam_diff2_ros import sim as sd
from wam_diff2_ros.cli.make_sample_bag import main as make_sample_bag_main
from wam_diff2_ros.replay.evaluation import EgoTrack, PlanRecord, compute_metrics

NS = 1_000_000_000


# ---------------------------------------------------------------------------------------------
# Ground truth (no images)


@pytest.fixture(scope="module")
def track():
    return sd.simulate_drive(25.0, seed=0)


def test_track_is_deterministic_and_seed_dependent(track):
    again = sd.simulate_drive(25.0, seed=0)
    assert np.array_equal(track.x, again.x) and np.array_equal(track.yaw, again.yaw)
    other = sd.simulate_drive(25.0, seed=1)
    assert not np.allclose(track.x, other.x)


def test_rates_and_stamps(track):
    assert len(track.stamps_ns) == 25 * 50
    assert track.stamps_ns[0] == sd.DEFAULT_START_NS
    assert set(np.diff(track.stamps_ns).tolist()) == {20_000_000}
    assert len(track.commands) == 50
    assert set(np.diff(track.command_stamps_ns).tolist()) == {500_000_000}


def test_motion_is_consistent_with_the_reported_velocities(track):
    """Finite differences of the poses reproduce speed, yaw rate and accelerations."""
    dt = 0.02
    vx = np.gradient(track.x, dt)
    vy = np.gradient(track.y, dt)
    # Velocity points along the heading (the rear axle does not slip) with the reported speed.
    np.testing.assert_allclose(np.hypot(vx, vy)[1:-1], track.speed[1:-1], atol=2e-3)
    heading = np.arctan2(vy, vx)
    assert np.max(np.abs(np.angle(np.exp(1j * (heading - track.yaw)))[1:-1])) < 2e-3
    np.testing.assert_allclose(np.gradient(track.yaw, dt)[1:-1], track.yaw_rate[1:-1], atol=2e-3)
    np.testing.assert_allclose(np.gradient(track.speed, dt)[1:-1], track.accel_x[1:-1], atol=1e-2)
    np.testing.assert_allclose(track.accel_y, track.speed * track.yaw_rate, atol=1e-9)
    assert np.max(np.abs(np.diff(track.accel_x))) < 0.05  # no jumps in acceleration at 50 Hz
    assert np.max(np.abs(np.diff(track.yaw_rate))) < 0.02


def test_scenario_straight_left_turn_straight(track):
    t = (track.stamps_ns - track.start_ns) / NS
    entry = (track.turn_entry_ns - track.start_ns) / NS
    exit_ = (track.turn_exit_ns - track.start_ns) / NS
    assert 6.0 < entry < exit_ < 18.0
    assert 15.0 <= track.turn_radius_m <= 30.0
    before, during = t < entry - 5.0, (t > entry + 1.0) & (t < exit_ - 1.0)
    after = (t > exit_ + 1.5) & (t < exit_ + 4.0)
    assert np.all(np.abs(track.yaw_rate[before]) < 1e-9)  # straight, cruising
    assert track.speed[before].min() > 7.5 and track.speed[before].max() < 8.5
    assert np.all(track.yaw_rate[during] > 0)  # turning left, slowly
    assert track.speed[during].min() > 4.0 and track.speed[during].max() < 5.0
    radius = track.speed[during] / track.yaw_rate[during]
    np.testing.assert_allclose(radius, track.turn_radius_m, rtol=0.02)
    heading_change = track.yaw[after][0] - track.yaw[before][-1]
    assert heading_change == pytest.approx(math.pi / 2, abs=0.02)
    assert np.all(np.abs(track.yaw_rate[after]) < 1e-9)  # straight again
    assert track.speed[-1] > track.speed[during].max() + 2.0  # re-accelerated
    assert track.accel_x.min() < -0.8 and track.accel_x.max() > 0.5


def test_command_says_left_three_seconds_before_the_turn_until_its_end(track):
    stamps = (track.command_stamps_ns - track.start_ns) / NS
    entry = (track.turn_entry_ns - track.start_ns) / NS
    exit_ = (track.turn_exit_ns - track.start_ns) / NS
    left = stamps[np.array(track.commands) == "left"]
    assert set(track.commands) == {"left", "straight"}
    assert left.min() == pytest.approx(entry - 3.0, abs=0.5)
    assert left.max() == pytest.approx(exit_, abs=0.5)
    assert np.all(np.diff(left) == pytest.approx(0.5))  # one contiguous block
    assert track.command_at(track.start_ns) == "straight"
    assert track.command_at(track.turn_entry_ns) == "left"


def test_pose_at_extends_past_the_samples(track):
    x, y, yaw = track.pose_at(int(track.stamps_ns[100]))
    assert (x, y, yaw) == pytest.approx((track.x[100], track.y[100], track.yaw[100]))
    end = int(track.stamps_ns[-1])
    x4, y4, _ = track.pose_at(end + 4 * NS)
    assert math.hypot(x4 - track.x[-1], y4 - track.y[-1]) > 20.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="seconds"):
        sd.simulate_drive(0.0)
    with pytest.raises(ValueError, match="seconds"):
        sd.simulate_drive(500.0)
    with pytest.raises(ValueError, match="rates"):
        sd.simulate_drive(5.0, rate_hz=0)


# ---------------------------------------------------------------------------------------------
# Rendering


def test_frames_are_deterministic_and_look_like_a_road_scene():
    a, b = sd.render_frames(25.0, seed=2, width=320, height=180, stamps_s=(0.0, 2.0))
    (a2,) = sd.render_frames(25.0, seed=2, width=320, height=180, stamps_s=(0.0,))
    assert a.shape == (180, 320, 3) and a.dtype == np.uint8
    assert np.array_equal(a, a2)
    assert np.mean(np.abs(a.astype(int) - b.astype(int))) > 3.0  # the scene moves
    sky, road = a[:10].reshape(-1, 3).mean(axis=0), a[-15:, 140:180].reshape(-1, 3).mean(axis=0)
    assert sky[2] > sky[0] + 20  # blue sky on top
    assert np.ptp(road) < 15 and 40 < road.mean() < 140  # grey asphalt in front of the car
    # Lane markings appear where the pinhole model of the mount projects them.
    cam = sd.CameraModel.for_size(320, 180)

    def pixel(x_ahead: float, y_left: float) -> tuple[int, int]:
        px, py, pz = x_ahead - sd.CAMERA_X_M, y_left, -sd.CAMERA_Z_M  # base_link, from the camera
        cp, sp = math.cos(sd.CAMERA_PITCH_RAD), math.sin(sd.CAMERA_PITCH_RAD)
        forward, up = cp * px - sp * pz, sp * px + cp * pz  # camera body axes (pitched down)
        u = cam.fx * (-py) / forward + cam.cx
        v = cam.fy * (-up) / forward + cam.cy
        return round(v), round(u)

    def brightness(rc: tuple[int, int]) -> float:
        return float(a[rc].astype(float).mean())

    right_edge, centre_dash, lane = pixel(8.0, -1.75), pixel(10.5, 1.75), pixel(10.5, 0.0)
    assert brightness(right_edge) > 170 and brightness(centre_dash) > 150
    assert brightness(lane) < 110  # asphalt between the markings
    assert brightness((right_edge[0], right_edge[1] - 12)) < 110
    assert brightness(pixel(6.0, 1.75)) < 110  # the gap between two dashes (s = 3..9 m)


# ---------------------------------------------------------------------------------------------
# The bag


@pytest.fixture(scope="module")
def short_bag(tmp_path_factory):
    pytest.importorskip("rclpy")
    out = tmp_path_factory.mktemp("sample") / "drive"
    result = sd.make_sample_bag(out, seconds=4.0, seed=3, width=480, height=270)
    return result


@pytest.fixture(scope="module")
def short_bag_messages(short_bag):
    from wam_diff2_ros.bag import BagReader

    with BagReader(short_bag.path) as reader:
        return reader, list(reader.messages())


@pytest.mark.ros
def test_bag_has_the_documented_topics_types_and_counts(short_bag, short_bag_messages):
    reader, _ = short_bag_messages
    assert (short_bag.path / "metadata.yaml").is_file() and list(short_bag.path.glob("*.mcap"))
    keys = ("image_compressed", "camera_info", "odometry", "acceleration", "command")
    assert {k: reader.topics[sd.SAMPLE_TOPICS[k]].msgtype for k in keys} == {k: sd.SAMPLE_TYPES[k] for k in keys}
    assert sd.SAMPLE_TOPICS["image_raw"] not in reader.topics
    counts = {k: reader.topics[sd.SAMPLE_TOPICS[k]].count for k in keys}
    assert counts == {"image_compressed": 40, "camera_info": 40, "odometry": 200, "acceleration": 200, "command": 8}
    assert short_bag.counts == {sd.SAMPLE_TOPICS[k]: v for k, v in counts.items()}


@pytest.mark.ros
def test_bag_stamps_are_monotonic_and_match_headers_and_rates(short_bag_messages):
    _, msgs = short_bag_messages
    stamps = [m.stamp_ns for m in msgs]
    assert stamps == sorted(stamps)
    assert stamps[0] >= sd.DEFAULT_START_NS and stamps[-1] < sd.DEFAULT_START_NS + 4 * NS
    by_topic: dict[str, list[int]] = {}
    for m in msgs:
        by_topic.setdefault(m.topic, []).append(m.stamp_ns)
        if hasattr(m.msg, "header"):
            assert m.msg.header.stamp.sec * NS + m.msg.header.stamp.nanosec == m.stamp_ns
    rates = {topic: NS / np.median(np.diff(v)) for topic, v in by_topic.items()}
    assert rates[sd.SAMPLE_TOPICS["odometry"]] == pytest.approx(50.0)
    assert rates[sd.SAMPLE_TOPICS["acceleration"]] == pytest.approx(50.0)
    assert rates[sd.SAMPLE_TOPICS["image_compressed"]] == pytest.approx(10.0)
    assert rates[sd.SAMPLE_TOPICS["camera_info"]] == pytest.approx(10.0)
    assert rates[sd.SAMPLE_TOPICS["command"]] == pytest.approx(2.0)


@pytest.mark.ros
def test_bag_odometry_matches_simulate_drive(short_bag_messages):
    _, msgs = short_bag_messages
    truth = sd.simulate_drive(4.0, seed=3)
    odom = [m.msg for m in msgs if m.topic == sd.SAMPLE_TOPICS["odometry"]]
    assert len(odom) == len(truth.stamps_ns)
    for i, msg in enumerate(odom):
        assert (msg.header.frame_id, msg.child_frame_id) == ("odom", "base_link")
        q = msg.pose.pose.orientation
        yaw = math.atan2(2 * (q.w * q.z + q.x * q.y), 1 - 2 * (q.y**2 + q.z**2))
        assert msg.pose.pose.position.x == pytest.approx(truth.x[i], abs=1e-9)
        assert msg.pose.pose.position.y == pytest.approx(truth.y[i], abs=1e-9)
        assert yaw == pytest.approx(truth.yaw[i], abs=1e-9)
        assert msg.twist.twist.linear.x == pytest.approx(truth.speed[i])
        assert msg.twist.twist.linear.y == 0.0
        assert msg.twist.twist.angular.z == pytest.approx(truth.yaw_rate[i])
    accel = [m.msg for m in msgs if m.topic == sd.SAMPLE_TOPICS["acceleration"]]
    assert accel[0].header.frame_id == "base_link"
    assert [a.accel.accel.linear.x for a in accel] == pytest.approx(truth.accel_x.tolist())
    commands = [m.msg.data for m in msgs if m.topic == sd.SAMPLE_TOPICS["command"]]
    assert commands == list(truth.commands)


@pytest.mark.ros
def test_bag_images_decode_to_the_right_size_and_camera_info_matches(short_bag_messages):
    _, msgs = short_bag_messages
    images = [m.msg for m in msgs if m.topic == sd.SAMPLE_TOPICS["image_compressed"]]
    infos = [m.msg for m in msgs if m.topic == sd.SAMPLE_TOPICS["camera_info"]]
    assert images[0].format == "jpeg" and images[0].header.frame_id == sd.CAMERA_FRAME
    for msg in (images[0], images[-1]):
        with Image.open(io.BytesIO(bytes(msg.data))) as img:
            assert img.format == "JPEG" and img.size == (480, 270) and img.mode == "RGB"
    cam = sd.CameraModel.for_size(480, 270)
    info = infos[0]
    assert (info.width, info.height, info.header.frame_id) == (480, 270, sd.CAMERA_FRAME)
    assert list(info.k) == pytest.approx(cam.k) and list(info.p) == pytest.approx(cam.p)
    assert info.distortion_model == "plumb_bob" and list(info.d) == [0.0] * 5
    assert info.k[0] == pytest.approx(240 / math.tan(math.radians(35)))


@pytest.mark.ros
def test_truncated_sample_bag_yields_a_prefix_then_raises(short_bag, short_bag_messages, tmp_path):
    import shutil

    from wam_diff2_ros.bag import BagReader, BagReadError

    _, full = short_bag_messages
    copy = tmp_path / "cut"
    shutil.copytree(short_bag.path, copy)
    (mcap,) = copy.glob("*.mcap")  # zstd-compressed chunks
    data = mcap.read_bytes()
    mcap.write_bytes(data[: len(data) // 2])
    got = []
    with BagReader(copy) as reader, pytest.raises(BagReadError, match=r"drive\.mcap.*byte"):
        for m in reader.messages():
            got.append(m)
    assert 0 < len(got) < len(full)
    assert [(m.topic, m.stamp_ns) for m in got] == [(m.topic, m.stamp_ns) for m in full[: len(got)]]
    assert got[-1].msg == full[len(got) - 1].msg


@pytest.mark.ros
def test_raw_bag_carries_the_rendered_pixels(tmp_path):
    from wam_diff2_ros.bag import BagReader

    result = sd.make_sample_bag(tmp_path / "raw", seconds=0.5, seed=4, width=160, height=96, raw=True)
    with BagReader(result.path) as reader:
        images = [m for m in reader.messages([sd.SAMPLE_TOPICS["image_raw"]])]
    assert len(images) == 5
    msg = images[2].msg
    assert (msg.encoding, msg.width, msg.height, msg.step) == ("rgb8", 160, 96, 480)
    pixels = np.frombuffer(bytes(msg.data), np.uint8).reshape(96, 160, 3)
    t = (images[2].stamp_ns - sd.DEFAULT_START_NS) / NS
    (expected,) = sd.render_frames(0.5, seed=4, width=160, height=96, stamps_s=(t,))
    assert np.array_equal(pixels, expected)


@pytest.mark.ros
def test_odometry_from_the_bag_evaluates_a_perfect_plan_as_exact(short_bag_messages):
    _, msgs = short_bag_messages
    odom = [m.msg for m in msgs if m.topic == sd.SAMPLE_TOPICS["odometry"]]
    ego = EgoTrack.from_odometry(odom)
    same = EgoTrack.from_odometry(m for m in msgs if m.topic == sd.SAMPLE_TOPICS["odometry"])  # BagMessages
    assert np.array_equal(ego.x, same.x) and np.array_equal(ego.stamps_ns, same.stamps_ns)
    truth = sd.simulate_drive(4.0, seed=3)
    plan_stamp = int(truth.stamps_ns[10])
    perfect = ego.future_in_ego_frame(plan_stamp)
    metrics = compute_metrics([PlanRecord(plan_stamp, True, np.nan_to_num(perfect))], ego)
    assert metrics["ade_2s"] == pytest.approx(0.0, abs=1e-9)
    assert metrics["count_3s"] == 1 and metrics["count_4s"] == 0  # the 4 s bag ends first
    # The ground truth from simulate_drive's exact poses agrees with the bag's odometry.
    x0, y0, yaw0 = truth.pose_at(plan_stamp)
    x2, y2, _ = truth.pose_at(plan_stamp + 2 * NS)
    forward = math.cos(yaw0) * (x2 - x0) + math.sin(yaw0) * (y2 - y0)
    assert perfect[3, 0] == pytest.approx(forward, abs=1e-6)


@pytest.mark.ros
def test_cli_writes_a_bag_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "cli"
    args = [str(out), "--seconds", "1", "--seed", "5", "--width", "160", "--height", "96"]
    assert make_sample_bag_main(args) == 0
    printed = capsys.readouterr().out
    assert "MB" in printed and "/odom: 50 messages" in printed
    assert make_sample_bag_main(args) == 2
    assert "exists already" in capsys.readouterr().err
    assert make_sample_bag_main([*args, "--overwrite"]) == 0
    assert make_sample_bag_main([str(tmp_path / "x"), "--seconds", "-1"]) == 2


@pytest.mark.ros
@pytest.mark.slow
def test_default_bag_is_under_10_mb(tmp_path):
    start = time.perf_counter()
    result = sd.make_sample_bag(tmp_path / "default")
    elapsed = time.perf_counter() - start
    print(f"default sample bag: {result.size_bytes / 1e6:.2f} MB in {elapsed:.1f} s")
    assert result.size_bytes < 10_000_000
    assert result.counts[sd.SAMPLE_TOPICS["image_compressed"]] == 250


def test_sample_bag_leaves_out_the_topics_asked(tmp_path):
    from wam_diff2_ros.bag import BagReader

    with pytest.raises(ValueError, match="not in"):
        sd.make_sample_bag(tmp_path / "bad", seconds=0.5, width=64, height=48, without=("wheels",))
    bag = sd.make_sample_bag(tmp_path / "no_odom", seconds=0.5, width=64, height=48, without=("odometry",)).path
    with BagReader(bag) as reader:
        assert sd.SAMPLE_TOPICS["odometry"] not in reader.topics
        assert reader.topics[sd.SAMPLE_TOPICS["image_compressed"]].count > 0
        assert reader.topics[sd.SAMPLE_TOPICS["acceleration"]].count > 0
