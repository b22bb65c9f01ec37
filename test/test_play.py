"""``wam-diff2-play``: a bag published over real DDS on its timeline, with ``/clock``, remaps and error handling.

The player runs as its own process (the installed console script); this process subscribes with rclpy.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wam_diff2_ros.bag.play import Pacer, is_latched, parse_remaps
from wam_diff2_ros.cli.play import main

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from core_helpers import wait_until
from node_helpers import Collector, Harness
from process_helpers import subprocess_env

from wam_diff2_ros.bag import BagReader, TopicInfo
from wam_diff2_ros.ros.conversions import stamp_to_ns
from wam_diff2_ros.sim import SAMPLE_TOPICS, make_sample_bag

pytestmark = pytest.mark.ros

PLAYER = str(Path(sys.executable).with_name("wam-diff2-play"))
FRONT = SAMPLE_TOPICS["image_compressed"]
ODOM = SAMPLE_TOPICS["odometry"]


@pytest.fixture(scope="module")
def bag(tmp_path_factory) -> Path:
    return make_sample_bag(tmp_path_factory.mktemp("play") / "drive", seconds=1.5, width=320, height=180).path


@pytest.fixture(scope="module")
def harness():
    h = Harness("play_harness")
    yield h
    h.close()


def _bag_messages(bag: Path, topic: str) -> list[tuple[int, int]]:
    """(receive time, header stamp) of every message of `topic` in the bag."""
    with BagReader(bag) as reader:
        return [(m.stamp_ns, stamp_to_ns(m.msg.header.stamp)) for m in reader.messages([topic])]


# --- units -----------------------------------------------------------------------------------------------------


def test_remaps_are_parsed_and_malformed_ones_refused():
    assert parse_remaps(["/a:=/b", "/c/d:=/e"]) == {"/a": "/b", "/c/d": "/e"}
    for bad in ("/a=/b", "a:=/b", "/a:=b", ":=/b"):
        with pytest.raises(ValueError, match="remap"):
            parse_remaps([bad])


def test_tf_static_and_transient_local_topics_are_latched():
    assert is_latched(TopicInfo("/tf_static", "tf2_msgs/msg/TFMessage", 1))
    assert not is_latched(TopicInfo("/tf", "tf2_msgs/msg/TFMessage", 1))


def test_pacer_maps_bag_time_to_wall_time_at_the_rate():
    now = [100.0]
    stop = threading.Event()
    pacer = Pacer(2.0, stop, clock=lambda: now[0])
    assert pacer.due(5_000_000_000) == 100.0  # the first message is due at once
    assert pacer.due(7_000_000_000) == pytest.approx(101.0)  # 2 s of bag at rate 2
    now[0] = 100.5
    assert pacer.bag_time(100.5) == 6_000_000_000
    now[0] = 101.0
    assert pacer.wait(7_000_000_000)
    stop.set()
    assert not pacer.wait(9_000_000_000)  # stopped before it was due


def test_pacer_ticks_the_clock_between_sparse_messages():
    pacer = Pacer(1.0, threading.Event())
    ticks: list[int] = []
    assert pacer.wait(0, ticks.append, 0.01)
    assert pacer.wait(150_000_000, ticks.append, 0.01)  # 150 ms of bag time, ticking every 10 ms
    assert len(ticks) >= 5 and ticks == sorted(ticks) and all(0 < t <= 150_000_000 for t in ticks)


def test_bad_arguments_and_missing_bag_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    assert "error:" in capsys.readouterr().err
    assert main([str(tmp_path), "--rate", "0"]) == 2
    assert "--rate" in capsys.readouterr().err
    assert main([str(tmp_path), "--qos-depth", "0"]) == 2
    assert "--qos-depth" in capsys.readouterr().err
    assert main([str(tmp_path), "--remap", "/a=/b"]) == 2
    assert "remap" in capsys.readouterr().err


def test_unknown_topic_is_refused_with_the_bag_s_topics(bag, capsys):
    assert main([str(bag), "--topics", "/not/there"]) == 2
    err = capsys.readouterr().err
    assert "/not/there" in err and FRONT in err


# --- over DDS --------------------------------------------------------------------------------------------------


def test_plays_every_message_in_order_with_clock_and_remap(bag, harness, tmp_path):
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import CompressedImage

    # Deep reader histories: a loaded machine may stall this process's executor for a moment, and a keep-last
    # reader overwrites what it has not handed out yet.
    history = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    images = Collector(harness.node, CompressedImage, "/played/front", history)
    odometry = Collector(harness.node, Odometry, ODOM, history)
    clock = Collector(harness.node, Clock, "/clock", history)
    rate = 2.0
    command = [PLAYER, str(bag), "--clock", "--rate", str(rate), "--remap", f"{FRONT}:=/played/front"]
    command += ["--wait-for-subscribers", "20", "--topics", FRONT, ODOM]
    started = time.monotonic()
    done = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    expected_images, expected_odometry = _bag_messages(bag, FRONT), _bag_messages(bag, ODOM)
    assert images.wait_for(lambda m: stamp_to_ns(m.header.stamp) == expected_images[-1][1], 10)
    assert odometry.wait_for(lambda m: stamp_to_ns(m.header.stamp) == expected_odometry[-1][1], 10)
    time.sleep(0.3)
    assert [stamp_to_ns(m.header.stamp) for m in images.snapshot()] == [s for _, s in expected_images]
    assert [stamp_to_ns(m.header.stamp) for m in odometry.snapshot()] == [s for _, s in expected_odometry]
    first = min(expected_images[0][0], expected_odometry[0][0])
    last = max(expected_images[-1][0], expected_odometry[-1][0])
    assert elapsed >= 0.9 * (last - first) / 1e9 / rate  # paced on the bag's timeline, not dumped
    ticks = [stamp_to_ns(m.clock) for m in clock.snapshot()]
    assert ticks == sorted(ticks)
    assert {t for t, _ in expected_images + expected_odometry} <= set(ticks)  # /clock reached each message's time
    assert ticks[0] >= first and ticks[-1] == last  # /clock runs over the bag's receive times
    for sub in (images, odometry, clock):
        harness.node.destroy_subscription(sub.subscription)


def test_truncated_bag_plays_what_is_readable_and_exits_3(bag, harness, tmp_path):
    from nav_msgs.msg import Odometry

    cut = tmp_path / "cut"
    shutil.copytree(bag, cut)
    storage = next(cut.glob("*.mcap"))
    storage.write_bytes(storage.read_bytes()[: int(storage.stat().st_size * 0.8)])
    odometry = Collector(harness.node, Odometry, ODOM)
    command = [PLAYER, str(cut), "--rate", "5", "--topics", ODOM, "--wait-for-subscribers", "20", "--quiet"]
    done = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "error:" in done.stderr and str(storage) in done.stderr
    assert wait_until(lambda: len(odometry.snapshot()) > 0)
    received = odometry.snapshot()
    assert 0 < len(received) < len(_bag_messages(bag, ODOM))
    harness.node.destroy_subscription(odometry.subscription)


def test_bag_damaged_before_any_channel_exits_3(bag, tmp_path, capsys):
    cut = tmp_path / "cut"
    shutil.copytree(bag, cut)
    storage = next(cut.glob("*.mcap"))
    storage.write_bytes(storage.read_bytes()[:200])
    assert main([str(cut)]) == 3
    assert "damaged" in capsys.readouterr().err
