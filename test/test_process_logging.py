"""The node's logger around a process stop (ros.process.ContextLogger): once SIGINT / SIGTERM shut the context
down, the last lines go to stderr instead of failing to reach /rosout."""

from __future__ import annotations

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

import rclpy
from process_helpers import unique_name
from rclpy.context import Context
from rclpy.node import Node

from wam_diff2_ros.ros.process import ContextLogger

pytestmark = pytest.mark.ros


@pytest.fixture
def node():
    context = Context()
    rclpy.init(context=context)
    node = Node(unique_name("logging"), context=context)
    yield node
    node.destroy_node()
    context.try_shutdown()


def test_a_stopping_node_logs_to_stderr_not_to_a_dead_rosout(node, capfd):
    logger = ContextLogger(node.get_logger(), node.context)
    assert logger.info("while running")
    node.context.shutdown()  # what rclpy's SIGINT / SIGTERM handler does
    assert logger.info("planning decode cancelled (shutting down); nothing published")
    assert logger.warning("a warning after the stop")
    assert not logger.debug("below the logger's level")
    err = capfd.readouterr().err
    assert "[INFO] " in err and f"[{node.get_logger().name}]: planning decode cancelled" in err
    assert "[WARN] " in err and "a warning after the stop" in err and "below the logger's level" not in err
    assert "Failed to publish" not in err  # the node process itself: test_node_shutdown.py


def test_throttled_lines_are_keyed_by_their_own_call_site(node, capfd):
    logger = ContextLogger(node.get_logger(), node.context)
    first = logger.info("first site", throttle_duration_sec=60.0)
    second = logger.info("second site", throttle_duration_sec=60.0)
    again = [logger.info("loop site", throttle_duration_sec=60.0) for _ in range(3)]
    assert first and second and again == [True, False, False]
