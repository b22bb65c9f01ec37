"""Typed, guarded parameters through the real parameter services (rclpy ``SetParameters`` / ``DescribeParameters``
clients over DDS): refused values come back with the reason, live changes apply to the next plan, structural
ones are refused on a configured node ("takes effect after reconfigure"), bad overrides fail configure instead
of killing the node."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from core_helpers import wait_until
from nav_msgs.msg import Path as PathMsg
from node_helpers import (
    REPO_ROOT,
    Collector,
    FeedSettings,
    Harness,
    NodeProcess,
    SensorFeeder,
    node_command,
    write_params,
)
from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import DescribeParameters, SetParameters
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from scripted_engine import ScriptedEngine

from wam_diff2_ros.ros.node import WamDiff2Node
from wam_diff2_ros.ros.params import PARAMETER_SPECS

pytestmark = pytest.mark.ros
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
NS = "/param_test"
NODE = f"{NS}/wam_diff2"


def set_parameter(harness: Harness, node: str, name: str, value: Any) -> Any:
    """One SetParameters call over DDS; the SetParametersResult."""
    request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
    response = harness.call(SetParameters, f"{node}/set_parameters", request, timeout=10.0)
    assert response is not None, f"{node}/set_parameters did not answer"
    return response.results[0]


@pytest.fixture(scope="module")
def harness():
    harness = Harness("param_test_client")
    yield harness
    harness.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory, harness):
    """The scripted node as a child process, active, planning at 0.05 Hz (no plan in its first 20 s)."""
    tmp = tmp_path_factory.mktemp("params")
    params = write_params(tmp / "params.yaml", {"model.path": str(tmp), "planning.rate_hz": 0.05})
    command = node_command([REPO_ROOT / "config" / "wam_diff2.yaml", params], "-r", f"__ns:={NS}")
    process = NodeProcess(command, tmp / "node.log")
    assert wait_until(lambda: harness.lifecycle_state(NODE, timeout=2.0) == "active", timeout=60), process.output()
    yield process
    assert process.stop() == 0, process.output()


def test_every_parameter_is_typed_with_a_description(node, harness) -> None:
    names = [spec.name for spec in PARAMETER_SPECS]
    response = harness.call(DescribeParameters, f"{NODE}/describe_parameters", DescribeParameters.Request(names=names))
    assert response is not None
    described = {d.name: d for d in response.descriptors}
    for spec in PARAMETER_SPECS:
        descriptor = described[spec.name]
        assert descriptor.type != ParameterType.PARAMETER_NOT_SET and not descriptor.dynamic_typing, spec.name
        assert descriptor.description == spec.description
    rate = described["planning.rate_hz"]
    assert rate.type == ParameterType.PARAMETER_DOUBLE and rate.floating_point_range[0].from_value == 0.0
    top_p = described["decoding.top_p"].floating_point_range[0]
    assert (top_p.from_value, top_p.to_value) == (0.0, 1.0) and "> 0" in described[
        "decoding.top_p"
    ].additional_constraints
    assert described["decoding.block_size"].integer_range[0].from_value == 1
    assert described["autostart"].read_only and not described["planning.rate_hz"].read_only
    assert "one of" in described["model.dtype"].additional_constraints


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("planning.rate_hz", -5.0, "planning.rate_hz out of range"),
        ("planning.rate_hz", "abc", "planning.rate_hz: wrong parameter type, expected double, got string 'abc'"),
        ("decoding.block_size", 2.5, "decoding.block_size: wrong parameter type, expected integer, got double 2.5"),
        ("decoding.block_size", 0, "decoding.block_size out of range"),
        ("decoding.top_p", 0.0, "decoding.top_p: must be > 0"),
        ("decoding.remasking_strategy", "fastest", "must be one of low_confidence_dynamic"),
        ("command.default", "backwards", "unknown navigation command 'backwards'"),
        ("model.path", "/tmp", "model.path takes effect after reconfigure"),
        ("qos.image.depth", 5, "qos.image.depth takes effect after reconfigure"),
        ("autostart", False, "read-only"),
    ],
)
def test_invalid_or_structural_changes_are_refused_with_the_reason(node, harness, name, value, reason) -> None:
    before = harness.get_parameters(NODE, [name])
    result = set_parameter(harness, NODE, name, value)
    assert not result.successful and reason in result.reason, result.reason
    assert harness.get_parameters(NODE, [name]) == before  # nothing was stored


def test_a_valid_rate_change_takes_effect_on_the_next_plan(node, harness) -> None:
    paths = Collector(harness.node, PathMsg, f"{NODE}/output/path")
    feeder = SensorFeeder(harness.node, NODE, FeedSettings(compressed_camera=False)).start()
    try:
        time.sleep(2.0)
        assert paths.snapshot() == []  # 0.05 Hz: the first plan would come after 20 s
        result = set_parameter(harness, NODE, "planning.rate_hz", 5)  # `ros2 param set ... 5`: an integer
        assert result.successful, result.reason
        assert paths.wait_for(timeout=10.0) is not None, node.output()
        assert harness.get_parameters(NODE, ["planning.rate_hz"])[0].double_value == 5.0
        assert wait_until(lambda: len(paths.snapshot()) >= 5, timeout=10.0)  # and it keeps planning
        assert set_parameter(harness, NODE, "planning.rate_hz", 0.0).successful  # each new front image
        count = len(paths.snapshot())
        assert wait_until(lambda: len(paths.snapshot()) >= count + 5, timeout=10.0)
        assert "parameters applied: planning.rate_hz=5.0" in node.output()
    finally:
        feeder.stop()
        harness.node.destroy_subscription(paths.subscription)


# --- in-process (real node and parameter services, the engine is inspected) -------------------------------


class Factory:
    def __init__(self) -> None:
        self.engines: list[ScriptedEngine] = []
        self.paths: list[str] = []

    def __call__(self, config) -> ScriptedEngine:
        self.paths.append(config.model_path)
        self.engines.append(ScriptedEngine(config))
        return self.engines[-1]


def test_live_decoding_change_reaches_the_next_decode_and_unconfigured_nodes_accept_structure(
    ros, tmp_path: Path
) -> None:
    factory = Factory()
    other = tmp_path / "other"
    other.mkdir()
    overrides = [Parameter("autostart", value=False), Parameter("model.path", value=str(tmp_path))]
    node = WamDiff2Node("live_params", engine_factory=factory, context=ros.context, parameter_overrides=overrides)
    ros.executor.add_node(node)
    client = ros.node.create_client(SetParameters, "/live_params/set_parameters")

    def set_remote(name: str, value: Any) -> Any:
        request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
        future = client.call_async(request)
        assert wait_until(future.done, timeout=10.0)
        return future.result().results[0]

    try:
        assert client.wait_for_service(timeout_sec=10.0)
        assert node.trigger_configure() == SUCCESS and node.trigger_activate() == SUCCESS
        assert set_remote("decoding.max_new_tokens", 64).successful
        engine = factory.engines[0]
        assert node._runtime is not None and node._runtime.pipeline.config.decode.max_new_tokens == 64
        assert set_remote("decoding.block_size", 16).successful
        assert node._runtime.pipeline.config.decode.block_size == 16
        assert set_remote("sync.max_age_ms", 250.0).successful
        assert node._runtime.buffer.sync.max_age_ms == 250.0
        refused = set_remote("model.path", str(other))
        assert not refused.successful and "takes effect after reconfigure" in refused.reason
        assert node.trigger_deactivate() == SUCCESS and node.trigger_cleanup() == SUCCESS
        assert set_remote("model.path", str(other)).successful  # unconfigured: used by the next configure
        assert node.trigger_configure() == SUCCESS
        assert factory.paths == [str(tmp_path), str(other)]
        assert node._config is not None and node._config.decode.block_size == 16
        assert engine.closed
    finally:
        ros.node.destroy_client(client)
        ros.executor.remove_node(node)
        node.close()
        node.destroy_node()


def test_bad_overrides_fail_configure_instead_of_killing_the_node(ros_context, tmp_path: Path) -> None:
    overrides = [
        Parameter("autostart", value=False),
        Parameter("model.path", value=str(tmp_path)),
        Parameter("planning.rate_hz", value="abc"),  # wrong type
        Parameter("decoding.block_size", value=-3),  # out of range
        Parameter("sync.max_age_ms", value=250),  # an integer for a double: converted
        Parameter("debug.camera_pose", value=[1, 0, 1, 0, 0, 0]),  # integers for doubles: converted
    ]
    node = WamDiff2Node("overrides", engine_factory=Factory(), context=ros_context, parameter_overrides=overrides)
    try:
        assert node.get_parameter("sync.max_age_ms").value == 250.0
        assert node.get_parameter("planning.rate_hz").value == 2.0  # the default stands meanwhile
        assert node.trigger_configure() == FAILURE
        message = node._health.diagnostics(node.now_ns()).status[0].message
        assert "planning.rate_hz: expected a finite number, got 'abc'" in message
        assert "decoding.block_size: must be >= 1, got -3" in message
        node.set_parameters([Parameter("planning.rate_hz", value=1.0), Parameter("decoding.block_size", value=8)])
        assert node.trigger_configure() == SUCCESS
        assert node._config is not None and node._config.debug_camera_pose == (1.0, 0.0, 1.0, 0.0, 0.0, 0.0)
        assert node.trigger_activate() == SUCCESS
        assert node.trigger_deactivate() == SUCCESS
    finally:
        node.close()
        node.destroy_node()
