"""The DDS simulator sends an image again when no trajectory comes for it (``EpisodeOptions.dds_resend_s``): a
planner that lost an observation (its odometry was not in yet) gets a second chance instead of the episode waiting
out ``dds_wait_s`` and counting the plan as missing. The planner here is a forgetful stand-in node in this process
(it answers an image only the second time it sees its stamp); the real node's DDS episode is test_drive_dds.py."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest


def test_an_image_the_planner_missed_is_sent_again(tmp_path: Path) -> None:
    rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable")
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from wam_diff2_ros.bag.types import message_class
    from wam_diff2_ros.drive.dds import PLANNER_TRAJECTORY, SIM_TOPICS
    from wam_diff2_ros.drive.episode import EpisodeOptions
    from wam_diff2_ros.drive.run import node_config, run_episode
    from wam_diff2_ros.drive.world import load_scenarios
    from wam_diff2_ros.ros.outputs import own_messages
    from wam_diff2_ros.sim.sample_bag import SAMPLE_TYPES

    msgs, problem = own_messages()
    if msgs is None:
        pytest.skip(f"the package's messages are not built: {problem}")
    initialised_here = not rclpy.ok()  # the episode uses rclpy's default context, as the console script does
    if initialised_here:
        rclpy.init()
    reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    planner = rclpy.create_node("forgetful_planner")
    publisher = planner.create_publisher(msgs.PlannedTrajectory, PLANNER_TRAJECTORY, reliable)
    seen: dict[tuple[int, int], int] = {}

    def on_image(msg: object) -> None:
        key = (msg.header.stamp.sec, msg.header.stamp.nanosec)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 2:  # the first copy is "lost", the resend is answered
            answer = msgs.PlannedTrajectory()
            answer.header = msg.header
            answer.valid = False
            answer.invalid_reason = "stand-in: no plan"
            publisher.publish(answer)

    for role, topic in SIM_TOPICS.items():  # the sensor topics, as the real node has them (the episode waits for it)
        kind = message_class(SAMPLE_TYPES["image_raw" if role == "image" else role])
        planner.create_subscription(kind, topic, on_image if role == "image" else (lambda _msg: None), reliable)
    executor = SingleThreadedExecutor()
    executor.add_node(planner)
    spinning = threading.Thread(target=executor.spin, daemon=True)
    spinning.start()

    lines: list[str] = []
    spec = replace(load_scenarios("straight_10")[0], duration_s=1.0)
    options = EpisodeOptions(
        out=tmp_path / "dds",
        latency_ms=300.0,
        width=160,
        height=90,
        video=False,
        dds=True,
        dds_wait_s=60.0,
        dds_resend_s=0.3,
    )
    try:
        model_dir = tmp_path / "model"
        model_dir.mkdir()
        run_episode(spec, options, node_config(str(model_dir), overrides={"planning.rate_hz": 0.0}), None, lines.append)
    finally:
        executor.shutdown(timeout_sec=30.0)
        spinning.join(timeout=30.0)
        planner.destroy_node()
        if initialised_here:
            rclpy.try_shutdown()

    score = json.loads((tmp_path / "dds" / "score.json").read_text())
    plans = score["plans"]
    assert plans["made"] >= 3, plans
    answered = [key for key, count in seen.items() if count >= 2]
    assert len(answered) == plans["made"], (seen, plans)
    assert not any("no trajectory from the planner" in line for line in lines), lines
    assert any("sending it again" in line for line in lines), lines
    assert score["wall_s"] < 30.0, score["wall_s"]  # no plan waited out dds_wait_s
