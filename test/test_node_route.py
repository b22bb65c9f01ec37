"""``command.source: route`` over real DDS: the node (a child process, scripted engine, ``node_helpers.py``) takes
the navigation command from a ``nav_msgs/Path`` of the route on ``~/input/route``.

The ego stands at (10 m, 5 m), heading +y (yaw 90°) in ``odom``, at 5 m/s. Checked: a route in ``odom`` published
once that turns left 20 m ahead gives ``left``, and keeps giving it longer than ``command.max_age_s`` (every
odometry message evaluates the kept route again); a straight route gives ``straight`` after the hold; a
``base_link`` route bending right gives ``right``; a route of one pose, with a NaN, or in a frame that is neither
``base_link`` nor the odometry's is refused with its reason in the diagnostics while the node keeps planning.
"""

from __future__ import annotations

import math
import time

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path as PathMsg
from node_helpers import (
    REPO_ROOT,
    Collector,
    FeedSettings,
    Harness,
    NodeProcess,
    SensorFeeder,
    diagnostic_status,
    node_command,
    write_params,
)

from wam_diff2_ros.ros.conversions import stamp_to_ns
from wam_diff2_ros.ros.outputs import own_messages

MSGS, _ = own_messages()
pytestmark = [
    pytest.mark.ros,
    pytest.mark.skipif(MSGS is None, reason="the package's messages are not built"),
]

NS = "/route_test"
NODE = f"{NS}/wam_diff2"
EGO = (10.0, 5.0, math.pi / 2)
# In odom: 10 m ahead of the ego (along +y), then away to the left (-x): the first point >= 20 m away, (0, 25),
# is 20 m ahead and 10 m to the left.
LEFT_IN_ODOM = [(10.0, 5.0), (10.0, 15.0), (0.0, 25.0), (-10.0, 30.0)]
STRAIGHT_IN_ODOM = [(10.0, 5.0 + 5.0 * k) for k in range(10)]
RIGHT_IN_BASE_LINK = [(0.0, 0.0), (10.0, 0.0), (25.0, -8.0)]


def route(node, frame: str, points: list[tuple[float, float]]) -> PathMsg:
    msg = PathMsg()
    msg.header.frame_id = frame
    msg.header.stamp = node.get_clock().now().to_msg()
    for x, y in points:
        pose = PoseStamped()
        pose.header = msg.header
        pose.pose.position.x, pose.pose.position.y = x, y
        pose.pose.orientation.w = 1.0
        msg.poses.append(pose)
    return msg


@pytest.fixture(scope="module")
def harness():
    h = Harness("route_test_harness")
    yield h
    h.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory, harness):
    tmp = tmp_path_factory.mktemp("route_node")
    params = write_params(
        tmp / "test.yaml",
        {
            "model.path": str(tmp),
            "planning.rate_hz": 4.0,
            "command.source": "route",
            "command.turn_signal_hold_s": 1.0,
            "command.max_age_s": 1.0,
            "debug.image": False,
            "diagnostics.period_s": 0.5,
        },
    )
    process = NodeProcess(
        node_command([REPO_ROOT / "config" / "wam_diff2.yaml", params], "-r", f"__ns:={NS}"), tmp / "node.log"
    )
    try:
        state = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and state != "active" and process.alive():
            state = harness.lifecycle_state(NODE, timeout=2.0)
        assert state == "active", process.output()
        yield process
    finally:
        code = process.stop()
        print(process.output()[-3000:])
    assert code == 0, f"node exited with {code}"


@pytest.fixture(scope="module")
def feeder(node, harness):
    settings = FeedSettings(commands=False, compressed_camera=False, pose=EGO)
    f = SensorFeeder(harness.node, NODE, settings).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def topics(node, harness):
    n = harness.node
    return {
        "trajectory": Collector(n, MSGS.PlannedTrajectory, f"{NODE}/output/trajectory"),
        "diagnostics": Collector(n, DiagnosticArray, "/diagnostics"),
        "publisher": n.create_publisher(PathMsg, f"{NODE}/input/route", 10),
    }


def _now(harness) -> int:
    return harness.node.get_clock().now().nanoseconds


def _commands(topics, since_ns: int) -> list[str]:
    return [t.navigation_command for t in topics["trajectory"].snapshot() if stamp_to_ns(t.header.stamp) > since_ns]


def _publish_until_subscribed(topics, msg) -> None:
    publisher = topics["publisher"]
    deadline = time.monotonic() + 10
    while publisher.get_subscription_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    publisher.publish(msg)


def test_a_route_gives_the_command_and_a_map_route_stays_fresh_with_odometry(node, feeder, topics, harness):
    _publish_until_subscribed(topics, route(harness.node, "odom", LEFT_IN_ODOM))
    first = topics["trajectory"].wait_for(lambda t: t.navigation_command == "left", 10, new_only=True)
    assert first is not None, node.output()[-2000:]
    # published once, yet still "left" after twice command.max_age_s (1 s): each odometry evaluates it again
    since = stamp_to_ns(first.header.stamp)
    time.sleep(2.5)
    seen = _commands(topics, since)
    assert len(seen) >= 4 and set(seen) == {"left"}, seen

    topics["publisher"].publish(route(harness.node, "odom", STRAIGHT_IN_ODOM))
    straight = _now(harness)
    time.sleep(2.5)  # straight takes effect only after the 1 s hold
    seen = _commands(topics, straight)
    assert seen[0] == "left" and seen[-1] == "straight", seen

    topics["publisher"].publish(route(harness.node, "base_link", RIGHT_IN_BASE_LINK))
    right = topics["trajectory"].wait_for(lambda t: t.navigation_command == "right", 5, new_only=True)
    assert right is not None, _commands(topics, straight)


@pytest.mark.parametrize(
    ("frame", "points", "reason"),
    [
        ("odom", [(10.0, 5.0)], "at least 2 points, got 1"),
        ("odom", [(10.0, 5.0), (float("nan"), 30.0)], "not finite"),
        ("map", STRAIGHT_IN_ODOM, "must be in 'base_link' or the frame 'odom'"),
    ],
)
def test_a_bad_route_is_refused_with_its_reason(node, feeder, topics, harness, frame, points, reason):
    topics["publisher"].publish(route(harness.node, frame, points))

    def refused(array) -> bool:
        status = diagnostic_status(array, "inputs")
        return status is not None and status.level == DiagnosticStatus.WARN and reason in status.message

    array = topics["diagnostics"].wait_for(refused, 10, new_only=True)
    assert array is not None, node.output()[-2000:]
    assert node.alive()
    start = _now(harness)
    assert topics["trajectory"].wait_for(lambda t: stamp_to_ns(t.header.stamp) > start, 5) is not None
