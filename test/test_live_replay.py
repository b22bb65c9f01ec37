"""Live replay = offline replay: the bag played over real DDS with a ``/clock`` topic (what ``ros2 bag play --clock``
does) into the installed ``wam_diff2_node`` running with ``use_sim_time:=true`` and ``planning.rate_hz: 0``, its
inputs remapped onto the bag's topic names, gives exactly the plans ``wam-diff2-replay`` computes for the same bag
and model (stamps, prompts, raw text, validity, waypoints).

``ros2 bag play`` itself is not on PyPI, so this process plays the bag: for each message it first advances
``/clock`` to the message's bag time, then publishes the message on its recorded topic. It paces the playback the
way a real-time player on a fast enough machine would look to the node: before each front image it gives the
earlier messages time to arrive, and after it waits for the node's plan, so the node never skips an image.

Runs with the tiny random checkpoint (token soup both ways is still an exact equality check) and with a trained
checkpoint (the demo model, or ``$WAM_DIFF2_TRAINED_CHECKPOINT``) when one is available, where the waypoints are
compared too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from core_helpers import tiny_checkpoint, wait_until
from node_helpers import REPO_ROOT, Collector, Harness, NodeProcess, node_command, trained_checkpoint, write_params

from wam_diff2_ros.bag import BagReader, message_class
from wam_diff2_ros.ros.conversions import stamp_to_ns
from wam_diff2_ros.ros.outputs import own_messages
from wam_diff2_ros.sim import SAMPLE_TOPICS, make_sample_bag

pytestmark = pytest.mark.ros

MSGS, MSGS_PROBLEM = own_messages()
NS = "/live"
NODE = f"{NS}/wam_diff2"
FRONT = SAMPLE_TOPICS["image_compressed"]
DECODING = {"decoding.max_new_tokens": 32, "decoding.denoising_steps": 4}
REMAPS = {
    "~/input/image_0": FRONT,
    "~/input/camera_info_0": SAMPLE_TOPICS["camera_info"],
    "~/input/odometry": SAMPLE_TOPICS["odometry"],
    "~/input/acceleration": SAMPLE_TOPICS["acceleration"],
    "~/input/command": SAMPLE_TOPICS["command"],
}
SETTLE_S = 0.2  # before a front image: let every earlier message reach the node
PLAN_TIMEOUT_S = 120.0


def _checkpoints() -> list[Any]:
    trained = trained_checkpoint()
    return [
        pytest.param("tiny", id="tiny"),
        pytest.param(
            "trained",
            id="trained",
            marks=pytest.mark.skipif(trained is None, reason="no trained checkpoint (demo model) available"),
        ),
    ]


@pytest.fixture(scope="module")
def harness():
    h = Harness("live_replay_harness")
    yield h
    h.close()


@pytest.fixture(scope="module")
def bag(tmp_path_factory) -> Path:
    return make_sample_bag(tmp_path_factory.mktemp("live") / "drive", seconds=0.8, width=320, height=180).path


def offline_predictions(bag: Path, checkpoint: Path, out: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """``wam-diff2-replay`` as a user runs it (its own process, like the node)."""
    command = [
        str(Path(sys.executable).with_name("wam-diff2-replay")),
        str(bag),
        "--out",
        str(out),
        "--model",
        str(checkpoint),
        "--rate-hz",
        "0",
        "--device",
        "cpu",
        "--no-plots",
        "--no-copy-inputs",
        *[arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")],
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def play(harness: Harness, bag: Path, plans: Collector) -> list[int]:
    """Publish the bag with /clock as ``ros2 bag play --clock`` would, paced so the node plans on every front image;
    returns the front image stamps."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    node = harness.node
    clock = node.create_publisher(Clock, "/clock", QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    publishers: dict[str, Any] = {}
    with BagReader(bag) as reader:
        for name, info in reader.topics.items():
            publishers[name] = node.create_publisher(message_class(info.msgtype), name, 10)
        assert wait_until(lambda: all(node.count_subscribers(t) >= 1 for t in REMAPS.values()), 30), "no subscribers"
        time.sleep(1.0)  # the node's side of discovery
        messages = list(reader.messages())
    front_stamps: list[int] = []
    pending: int | None = None
    now = 0
    for message in messages:
        if pending is not None and message.stamp_ns > pending:
            assert plans.wait_for(lambda m, s=pending: stamp_to_ns(m.header.stamp) == s, PLAN_TIMEOUT_S), pending
            pending = None
        if message.topic == FRONT:
            time.sleep(SETTLE_S)
        if message.stamp_ns > now:
            now = message.stamp_ns
            clock.publish(Clock(clock=_time(now)))
        publishers[message.topic].publish(message.msg)
        if message.topic == FRONT:
            front_stamps.append(message.stamp_ns)
            pending = message.stamp_ns
        time.sleep(0.001)
    if pending is not None:
        assert plans.wait_for(lambda m, s=pending: stamp_to_ns(m.header.stamp) == s, PLAN_TIMEOUT_S), pending
    for publisher in [clock, *publishers.values()]:
        node.destroy_publisher(publisher)
    return front_stamps


def _time(stamp_ns: int) -> Any:
    from builtin_interfaces.msg import Time

    return Time(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)


@pytest.mark.skipif(MSGS is None, reason=f"the package's messages are not built: {MSGS_PROBLEM}")
@pytest.mark.parametrize("which", _checkpoints())
def test_live_replay_with_sim_time_matches_offline_replay(which: str, bag: Path, harness, tmp_path: Path) -> None:
    checkpoint = tiny_checkpoint() if which == "tiny" else trained_checkpoint()
    assert checkpoint is not None
    if which == "tiny":
        settings: dict[str, Any] = DECODING
    else:  # both sides keep the node's default image limits (the checkpoint's processor caps them)
        settings = {}
    offline = offline_predictions(bag, checkpoint, tmp_path / "offline", settings)
    assert [r["status"] for r in offline] == ["planned"] * len(offline) and len(offline) == 8

    params = write_params(
        tmp_path / "live.yaml",
        {
            "model.path": str(checkpoint),
            "model.device": "cpu",
            "model.dtype": "float32",
            "use_sim_time": True,
            "planning.rate_hz": 0.0,
            "cameras.transports": ["compressed"],
            **settings,
        },
    )
    remaps = [arg for source, target in REMAPS.items() for arg in ("-r", f"{source}:={target}")]
    command = node_command(
        [REPO_ROOT / "config" / "wam_diff2.yaml", params], "-r", f"__ns:={NS}", *remaps, scripted=False
    )
    process = NodeProcess(command, tmp_path / "node.log")
    plans = Collector(harness.node, MSGS.PlannedTrajectory, f"{NODE}/output/trajectory")
    try:
        active = wait_until(lambda: harness.lifecycle_state(NODE, timeout=1.0) == "active" or not process.alive(), 120)
        assert active and process.alive(), process.output()
        front_stamps = play(harness, bag, plans)
        live = plans.snapshot()
    finally:
        code = process.stop()
        harness.node.destroy_subscription(plans.subscription)
    assert code == 0, process.output()[-3000:]

    assert [stamp_to_ns(m.header.stamp) for m in live] == front_stamps == [r["stamp_ns"] for r in offline]
    for msg, record in zip(live, offline, strict=True):
        assert msg.prompt == record["prompt"]
        assert msg.raw_text == record["raw_text"]
        assert msg.valid == record["valid"] and msg.invalid_reason == record["reason"]
        assert msg.navigation_command == record["command"]
        assert [msg.ego_velocity.x, msg.ego_velocity.y] == record["velocity"]
        assert [msg.ego_acceleration.x, msg.ego_acceleration.y] == record["acceleration"]
        waypoints = [[p.pose.position.x, p.pose.position.y] for p in msg.points]
        assert waypoints == (record["waypoints"] or [])
        # the node's clock is the bag clock: the image is 0 ms old when planned (wall time would make it years)
        assert abs(msg.timing.end_to_end_ms) < 1000.0
    if which == "trained":
        assert any(r["valid"] for r in offline), "the trained checkpoint should answer valid plans"
