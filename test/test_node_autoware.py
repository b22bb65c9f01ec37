"""The node as Autoware's end-to-end planner, over real DDS with the scripted engine (``node_helpers.py``).

A child process runs the node with ``autoware.outputs`` on and ``command.source: turn_indicators``; this process
feeds camera and odometry (ego at (10 m, 5 m), yaw 90° in ``odom``, 5 m/s) and publishes Autoware's
``TurnIndicatorsCommand``. Checked: every ``~/output/autoware/trajectory`` passes the trajectory follower's input
rules (:func:`follower_problems`) and its poses are ``path_fixed``'s after the ego point; candidates name their
generator; the turn signal drives the command with its hold; an unknown signal value is refused with its reason.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")
autoware_planning_msgs = pytest.importorskip(
    "autoware_planning_msgs.msg", reason="autoware messages missing: run wam-diff2-build-interfaces"
)

from autoware_internal_planning_msgs.msg import CandidateTrajectories  # noqa: E402
from autoware_vehicle_msgs.msg import TurnIndicatorsCommand  # noqa: E402
from core_helpers import wait_until  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from nav_msgs.msg import Path as PathMsg  # noqa: E402
from node_helpers import (  # noqa: E402
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

from wam_diff2_ros.ros.autoware import GENERATOR_ID, GENERATOR_NAME  # noqa: E402
from wam_diff2_ros.ros.conversions import stamp_to_ns  # noqa: E402
from wam_diff2_ros.ros.outputs import own_messages  # noqa: E402

pytestmark = pytest.mark.ros

NS = "/autoware_test"
NODE = f"{NS}/wam_diff2"
EGO = (10.0, 5.0, math.pi / 2)
MSGS, _ = own_messages()


def follower_problems(trajectory) -> list[str]:
    """What Autoware's trajectory follower would refuse in ``trajectory``: fewer than 3 points, a non-finite value,
    ``time_from_start`` not strictly increasing, no frame, a zero stamp."""
    problems = []
    points = trajectory.points
    if len(points) < 3:
        problems.append(f"{len(points)} points")
    if not trajectory.header.frame_id or stamp_to_ns(trajectory.header.stamp) == 0:
        problems.append("no frame or stamp")
    times = [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in points]
    if any(b <= a for a, b in itertools.pairwise(times)):
        problems.append(f"times not increasing: {times}")
    for i, p in enumerate(points):
        pose = p.pose
        values = [
            pose.position.x,
            pose.position.y,
            pose.position.z,
            pose.orientation.x,
            pose.orientation.y,
            pose.orientation.z,
            pose.orientation.w,
            p.longitudinal_velocity_mps,
            p.lateral_velocity_mps,
            p.acceleration_mps2,
            p.heading_rate_rps,
            p.front_wheel_angle_rad,
            p.rear_wheel_angle_rad,
        ]
        if not all(math.isfinite(v) for v in values):
            problems.append(f"point {i} not finite")
    return problems


class TurnSignal:
    """Publishes ``TurnIndicatorsCommand`` at 10 Hz (Autoware's planning rate), value changeable."""

    def __init__(self, node) -> None:
        self.node = node
        self.value = TurnIndicatorsCommand.ENABLE_LEFT
        self.publisher = node.create_publisher(TurnIndicatorsCommand, f"{NODE}/input/turn_indicators", 10)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            msg = TurnIndicatorsCommand(command=self.value)
            msg.stamp = self.node.get_clock().now().to_msg()
            self.publisher.publish(msg)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def harness():
    h = Harness("autoware_test_harness")
    yield h
    h.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory, harness):
    tmp = tmp_path_factory.mktemp("autoware_node")
    params = write_params(
        tmp / "test.yaml",
        {
            "model.path": str(tmp),
            "planning.rate_hz": 4.0,
            "autoware.outputs": True,
            "command.source": "turn_indicators",
            "command.turn_signal_hold_s": 1.0,
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
def signal(node, harness):
    s = TurnSignal(harness.node)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def feeder(node, harness, signal):
    settings = FeedSettings(commands=False, compressed_camera=False, pose=EGO)
    f = SensorFeeder(harness.node, NODE, settings).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def topics(node, harness):
    n = harness.node
    collectors = {
        "path": Collector(n, PathMsg, f"{NODE}/output/path"),
        "path_fixed": Collector(n, PathMsg, f"{NODE}/output/path_fixed"),
        "autoware": Collector(n, autoware_planning_msgs.Trajectory, f"{NODE}/output/autoware/trajectory"),
        "candidates": Collector(n, CandidateTrajectories, f"{NODE}/output/autoware/candidates"),
        "diagnostics": Collector(n, DiagnosticArray, "/diagnostics"),
    }
    if MSGS is not None:
        collectors["trajectory"] = Collector(n, MSGS.PlannedTrajectory, f"{NODE}/output/trajectory")
    return collectors


def _now(harness) -> int:
    return harness.node.get_clock().now().nanoseconds


def _planned_commands(topics, since_ns: int) -> list[str]:
    return [t.navigation_command for t in topics["trajectory"].snapshot() if stamp_to_ns(t.header.stamp) > since_ns]


def test_the_trajectory_passes_the_followers_rules_and_matches_path_fixed(node, feeder, signal, topics, harness):
    start = _now(harness)
    trajectory = topics["autoware"].wait_for(lambda t: stamp_to_ns(t.header.stamp) > start, 15)
    assert trajectory is not None, node.output()
    assert follower_problems(trajectory) == []
    stamp = stamp_to_ns(trajectory.header.stamp)
    fixed = topics["path_fixed"].wait_for(lambda p: stamp_to_ns(p.header.stamp) == stamp, 5)
    path = topics["path"].wait_for(lambda p: stamp_to_ns(p.header.stamp) == stamp, 5)
    assert fixed is not None and path is not None  # published together, same image stamp
    assert trajectory.header.frame_id == "odom" == fixed.header.frame_id
    assert len(trajectory.points) == 1 + len(fixed.poses) == 9
    ego = trajectory.points[0]
    assert (ego.time_from_start.sec, ego.time_from_start.nanosec) == (0, 0)
    assert ego.pose.position.x == pytest.approx(EGO[0], abs=0.05) and ego.pose.position.y == pytest.approx(EGO[1])
    assert 2.0 * math.atan2(ego.pose.orientation.z, ego.pose.orientation.w) == pytest.approx(EGO[2], abs=1e-6)
    assert ego.longitudinal_velocity_mps == pytest.approx(5.0)
    xy = [(p.pose.position.x, p.pose.position.y) for p in trajectory.points]
    for i, (point, stamped) in enumerate(zip(trajectory.points[1:], fixed.poses, strict=True), start=1):
        assert point.pose.position == stamped.pose.position
        if i < len(xy) - 1:  # the path's tangent: the central difference's direction
            tangent = math.atan2(xy[i + 1][1] - xy[i - 1][1], xy[i + 1][0] - xy[i - 1][0])
            yaw = 2.0 * math.atan2(point.pose.orientation.z, point.pose.orientation.w)
            assert math.remainder(yaw - tangent, math.tau) == pytest.approx(0.0, abs=1e-6)
        offset_ns = stamp_to_ns(stamped.header.stamp) - stamp
        assert point.time_from_start.sec * 1_000_000_000 + point.time_from_start.nanosec == offset_ns
        assert point.lateral_velocity_mps == 0.0 and point.rear_wheel_angle_rad == 0.0
    # a left plan at 5 m/s: ~5 m/s along it, turning left (positive heading rate and wheel angle) further out
    assert all(p.longitudinal_velocity_mps == pytest.approx(5.0, rel=0.3) for p in trajectory.points[1:4])
    assert trajectory.points[-1].heading_rate_rps > 0 and trajectory.points[-1].front_wheel_angle_rad > 0

    candidates = topics["candidates"].wait_for(
        lambda c: c.candidate_trajectories and stamp_to_ns(c.candidate_trajectories[0].header.stamp) == stamp, 5
    )
    assert candidates is not None
    (candidate,) = candidates.candidate_trajectories
    (info,) = candidates.generator_info
    assert bytes(candidate.generator_id.uuid) == bytes(info.generator_id.uuid) == GENERATOR_ID.bytes
    assert info.generator_name.data == GENERATOR_NAME
    assert list(candidate.points) == list(trajectory.points)


@pytest.mark.skipif(MSGS is None, reason="the package's messages are not built")
def test_the_turn_signal_drives_the_command_with_a_hold(node, feeder, signal, topics, harness):
    signal.value = TurnIndicatorsCommand.ENABLE_LEFT
    time.sleep(1.0)
    # a blinking / briefly dropped signal (0.4 s off, shorter than the 1 s hold) keeps "left"
    start = _now(harness)
    signal.value = TurnIndicatorsCommand.DISABLE
    time.sleep(0.4)
    signal.value = TurnIndicatorsCommand.ENABLE_LEFT
    time.sleep(1.0)
    seen = _planned_commands(topics, start)
    assert seen and set(seen) == {"left"}, seen
    # off for longer than the hold: straight
    signal.value = TurnIndicatorsCommand.DISABLE
    off = _now(harness)
    time.sleep(2.5)
    seen = _planned_commands(topics, off)
    assert seen[-1] == "straight" and "right" not in seen, seen
    signal.value = TurnIndicatorsCommand.ENABLE_RIGHT
    right = _now(harness)
    time.sleep(1.0)
    assert _planned_commands(topics, right)[-1] == "right"
    signal.value = TurnIndicatorsCommand.ENABLE_LEFT


def test_an_unknown_signal_value_is_refused_with_its_reason(node, feeder, signal, topics, harness):
    signal.value = 7
    try:

        def refused(array) -> bool:
            status = diagnostic_status(array, "inputs")
            return status is not None and status.level == DiagnosticStatus.WARN and "command 7" in status.message

        array = topics["diagnostics"].wait_for(refused, 10, new_only=True)
        assert array is not None, node.output()[-2000:]
        assert "TurnIndicatorsCommand" in diagnostic_status(array, "inputs").message
    finally:
        signal.value = TurnIndicatorsCommand.ENABLE_LEFT
    assert node.alive()


def test_a_missing_autoware_package_fails_configure_naming_it(tmp_path, harness) -> None:
    """The node without autoware_planning_msgs (hidden from its interpreter): configure fails, names the package
    and how to build it, and the node stays up."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['autoware_planning_msgs'] = None\n")
    params = write_params(tmp_path / "p.yaml", {"model.path": str(tmp_path), "autoware.outputs": True})

    env = {"PYTHONPATH": os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")])}
    process = NodeProcess(node_command([params], "-r", "__ns:=/no_autoware"), tmp_path / "node.log", env=env)
    try:
        assert wait_until(lambda: "configure failed" in process.output(), timeout=60), process.output()
        log = process.output()
        assert "autoware.outputs needs the message package(s) autoware_planning_msgs" in log
        assert "wam-diff2-build-interfaces" in log and "ros-$ROS_DISTRO-autoware-planning-msgs" in log
        assert harness.lifecycle_state("/no_autoware/wam_diff2") == "unconfigured" and process.alive()
    finally:
        assert process.stop() == 0


def test_diagnostics_warn_when_plans_come_slower_than_the_followers_timeout() -> None:
    from wam_diff2_ros.core.timing import StageTiming
    from wam_diff2_ros.ros.autoware import FOLLOWER_TIMEOUT_S
    from wam_diff2_ros.ros.diagnostics import NodeHealth

    def planning(health, now_ns):
        return diagnostic_status(health.diagnostics(now_ns), "planning")

    health = NodeHealth("wam_diff2")
    health.follower_timeout_s = FOLLOWER_TIMEOUT_S
    health.plan_done(True, "", StageTiming(), 0, 0)
    health.plan_done(True, "", StageTiming(), 500_000_000, 0)
    assert planning(health, 600_000_000).level == DiagnosticStatus.OK
    health.plan_done(True, "", StageTiming(), 1_700_000_000, 0)
    status = planning(health, 1_800_000_000)
    assert status.level == DiagnosticStatus.WARN
    assert "1.20 s apart, slower than the trajectory follower's 0.9 s timeout" in status.message
    health.follower_timeout_s = 0.0  # without autoware.outputs: no such warning
    assert planning(health, 1_800_000_000).level == DiagnosticStatus.OK


def test_the_node_alone_plans_with_a_fixed_command_and_says_so_once(tmp_path, harness) -> None:
    """The end-to-end slot without the rule-based planner: no turn signal, no command topic. With
    ``command.source: fixed`` the node reads no command input, plans with ``command.default`` and warns once."""
    ns = "/autoware_fixed"
    node_name = f"{ns}/wam_diff2"
    params = write_params(
        tmp_path / "fixed.yaml",
        {
            "model.path": str(tmp_path),
            "planning.rate_hz": 4.0,
            "autoware.outputs": True,
            "command.source": "fixed",
            "command.default": "straight",
            "debug.image": False,
        },
    )
    process = NodeProcess(
        node_command([REPO_ROOT / "config" / "wam_diff2.yaml", params], "-r", f"__ns:={ns}"), tmp_path / "node.log"
    )
    n = harness.node
    trajectories = Collector(n, autoware_planning_msgs.Trajectory, f"{node_name}/output/autoware/trajectory")
    own = Collector(n, MSGS.PlannedTrajectory, f"{node_name}/output/trajectory") if MSGS is not None else None
    feeder = None
    try:
        assert wait_until(lambda: harness.lifecycle_state(node_name, timeout=1.0) == "active", 60), process.output()
        settings = FeedSettings(commands=False, compressed_camera=False, pose=EGO)
        feeder = SensorFeeder(n, node_name, settings).start()
        assert trajectories.wait_for(lambda t: follower_problems(t) == [], 20) is not None, process.output()
        assert wait_until(lambda: len(trajectories.snapshot()) >= 3, 20), process.output()
        for topic in ("turn_indicators", "command", "driving_command"):
            assert n.count_subscribers(f"{node_name}/input/{topic}") == 0, topic
        if own is not None:
            assert {t.navigation_command for t in own.snapshot()} == {"straight"}
        log = process.output()
        assert log.count("command.source fixed: every plan uses command.default 'straight'") == 1, log[-3000:]
    finally:
        if feeder is not None:
            feeder.stop()
        code = process.stop()
    assert code == 0, process.output()
