"""The node's live view (``viewer.port``, ``viewer.host``): a real rclpy node in-process serves Foxglove's
WebSocket protocol from configure to cleanup; a port that cannot be served costs the view, never the node; an
invalid port fails configure with the reason. (The plans it carries: test_viewer_replay.py, same code path.)
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")
pytest.importorskip("foxglove", reason="the live view needs foxglove-sdk (pip install '.[viewer]')")
pytest.importorskip("websockets", reason="the protocol client needs websockets (pip install '.[test]')")
pytest.importorskip("google.protobuf", reason="decoding needs protobuf (pip install '.[test]')")

from foxglove_client import FoxgloveClient  # noqa: E402
from listening import listening_sockets  # noqa: E402
from rclpy.lifecycle import TransitionCallbackReturn  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from scripted_engine import ScriptedEngine  # noqa: E402

from wam_diff2_ros.ros.node import WamDiff2Node  # noqa: E402
from wam_diff2_ros.viewer import TOPICS  # noqa: E402

pytestmark = pytest.mark.ros
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


@pytest.fixture
def make_node(ros_context, tmp_path: Path):
    created: list[WamDiff2Node] = []

    def make(**parameters) -> WamDiff2Node:
        overrides = [Parameter("autostart", value=False), Parameter("model.path", value=str(tmp_path))]
        overrides += [Parameter(name, value=value) for name, value in parameters.items()]
        node = WamDiff2Node(engine_factory=ScriptedEngine, context=ros_context, parameter_overrides=overrides)
        created.append(node)
        return node

    yield make
    for node in created:
        node.close()
        node.destroy_node()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_viewer_is_off_by_default(make_node) -> None:
    node = make_node()
    assert node.get_parameter("viewer.port").value == 0
    assert node.get_parameter("viewer.host").value == "127.0.0.1"
    assert node.trigger_configure() == SUCCESS
    assert node._worker.view is None


def test_node_serves_the_view_from_configure_to_cleanup(make_node) -> None:
    port = free_port()
    node = make_node(**{"viewer.port": port})
    assert node.trigger_configure() == SUCCESS
    view = node._worker.view
    assert view is not None and view.url == f"ws://127.0.0.1:{port}"
    listeners = {s for s in listening_sockets({os.getpid()}) if s.port == port}
    assert listeners and all(s.loopback for s in listeners), sorted(map(str, listeners))  # not on 0.0.0.0
    client = FoxgloveClient(view.url)
    try:
        assert client.wait_for_channels(TOPICS.values())
        assert client.server_info["name"] == node.get_name()
    finally:
        client.close()
    assert node.trigger_cleanup() == SUCCESS
    assert node._worker.view is None
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # nothing listens any more


def test_a_port_in_use_costs_the_view_not_the_node(make_node) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        node = make_node(**{"viewer.port": taken.getsockname()[1]})
        assert node.trigger_configure() == SUCCESS
        assert node._worker.view is None and node._runtime is not None


def test_invalid_viewer_parameters_fail_configure(make_node) -> None:
    assert make_node(**{"viewer.port": 70000}).trigger_configure() == FAILURE
    assert make_node(**{"viewer.host": " "}).trigger_configure() == FAILURE
