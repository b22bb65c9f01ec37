"""WamDiff2Node's lifecycle in-process (real rclpy node, no peers needed): transitions, model loading and
unloading, configure failures that leave the node unconfigured with the reason."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from rclpy.lifecycle import TransitionCallbackReturn  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from scripted_engine import ScriptedEngine  # noqa: E402

from wam_diff2_ros.core.checkpoint import CheckpointError  # noqa: E402
from wam_diff2_ros.ros.conversions import stamp_to_ns  # noqa: E402
from wam_diff2_ros.ros.node import WamDiff2Node  # noqa: E402

pytestmark = pytest.mark.ros
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


class Factory:
    """Engine factory that records the engines it made (or raises ``error``)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.engines: list[ScriptedEngine] = []
        self.error = error

    def __call__(self, config) -> ScriptedEngine:
        if self.error is not None:
            raise self.error
        engine = ScriptedEngine(config)
        self.engines.append(engine)
        return engine


@pytest.fixture
def make_node(ros_context, tmp_path: Path):
    created: list[WamDiff2Node] = []

    def make(factory: Factory, **parameters) -> WamDiff2Node:
        overrides = [Parameter("autostart", value=False), Parameter("model.path", value=str(tmp_path))]
        overrides += [Parameter(name, value=value) for name, value in parameters.items()]
        node = WamDiff2Node(engine_factory=factory, context=ros_context, parameter_overrides=overrides)
        created.append(node)
        return node

    yield make
    for node in created:
        node.close()
        node.destroy_node()


def diagnostics(node: WamDiff2Node) -> dict[str, object]:
    array = node._health.diagnostics(node.now_ns())
    return {status.name.split(": ")[1]: status for status in array.status}


def test_transitions_load_and_unload_the_model(make_node) -> None:
    factory = Factory()
    node = make_node(factory, **{"model.unload_on_deactivate": True})
    assert factory.engines == []  # autostart false: nothing loaded yet
    assert node.trigger_configure() == SUCCESS
    assert len(factory.engines) == 1 and not factory.engines[0].closed
    assert node.trigger_activate() == SUCCESS
    assert node._worker is not None and node._worker.is_alive()
    assert len(node._input_subscriptions) > 0
    assert diagnostics(node)["model"].message == "loaded scripted-engine on cpu (float32)"
    worker = node._worker
    assert node.trigger_deactivate() == SUCCESS
    assert not worker.is_alive() and node._input_subscriptions == []
    assert factory.engines[0].closed  # unload_on_deactivate
    assert node.trigger_activate() == SUCCESS
    assert len(factory.engines) == 2 and not factory.engines[1].closed  # reloaded
    assert node.trigger_deactivate() == SUCCESS
    assert node.trigger_cleanup() == SUCCESS
    assert all(engine.closed for engine in factory.engines)
    assert node._runtime is None and node._outputs == {}


def test_model_stays_loaded_across_deactivate_by_default(make_node) -> None:
    factory = Factory()
    node = make_node(factory, **{"model.warmup": True, "model.warmup_image_size": [64, 48]})
    assert node.trigger_configure() == SUCCESS and node.trigger_activate() == SUCCESS
    warmup = factory.engines[0].calls[0]  # one plan at configure, shaped as the node's plans
    assert "The navigation information is: straight" in warmup["prompt"]
    assert [frame.shape for frame in warmup["images"]] == [(48, 64, 3)]
    assert warmup["decode"] == node._config.decode
    assert node.trigger_deactivate() == SUCCESS
    assert not factory.engines[0].closed
    assert node.trigger_activate() == SUCCESS
    assert len(factory.engines) == 1
    assert node.trigger_shutdown() == SUCCESS
    assert factory.engines[0].closed


def test_checkpoint_error_fails_configure_with_the_reason(make_node) -> None:
    node = make_node(Factory(CheckpointError("/ckpt: config.json is missing")))
    assert node.trigger_configure() == FAILURE
    status = diagnostics(node)["model"]
    assert status.level == b"\x02" and "config.json is missing" in status.message
    # The node is still usable: configure again after fixing the cause.
    node._engine_factory = Factory()
    assert node.trigger_configure() == SUCCESS


def test_misspelt_parameter_fails_configure(make_node) -> None:
    node = make_node(Factory(), **{"planning.rate_hz": 3.0, "qos.image.reliablity": "x"})
    assert node.trigger_configure() == FAILURE
    message = diagnostics(node)["model"].message
    assert "planning.rate_hz" not in message
    assert "qos.image.reliablity: unknown parameter (misspelt?)" in message


def test_parameters_of_other_nodes_are_ignored_with_a_warning(make_node) -> None:
    node = make_node(Factory(), **{"planing.rate_hz": 5.0, "camera_driver.fps": 30})
    assert node.trigger_configure() == SUCCESS
    assert node.ignored_parameters == ["camera_driver.fps", "planing.rate_hz"]


def test_rate_zero_plans_once_per_front_image(ros, tmp_path: Path) -> None:
    """planning.rate_hz 0: one plan per new front image (same process, real DDS between the two nodes)."""
    from core_helpers import wait_until
    from nav_msgs.msg import Path as PathMsg
    from node_helpers import Collector, FeedSettings, SensorFeeder

    overrides = [
        Parameter("autostart", value=False),
        Parameter("model.path", value=str(tmp_path)),
        Parameter("planning.rate_hz", value=0.0),
    ]
    node = WamDiff2Node(engine_factory=Factory(), context=ros.context, parameter_overrides=overrides)
    ros.executor.add_node(node)
    feeder = None
    try:
        assert node.trigger_configure() == SUCCESS and node.trigger_activate() == SUCCESS
        paths = Collector(ros.node, PathMsg, "/wam_diff2/output/path")
        settings = FeedSettings(image_rate_hz=4.0, compressed_camera=False)
        feeder = SensorFeeder(ros.node, "/wam_diff2", settings).start()
        assert wait_until(lambda: len(paths.snapshot()) >= 1, timeout=10)
        time.sleep(2.0)
        feeder.stop()
        sent = feeder.sent_image_stamps

        def planned() -> list[int]:
            return [stamp_to_ns(p.header.stamp) for p in paths.snapshot()]

        # under load the last images are still in flight when the feeder stops: wait for them (bounded)
        wait_until(lambda: len(planned()) >= len(sent[sent.index(planned()[0]) :]) - 1, timeout=5)
        stamps = planned()
        assert len(stamps) == len(set(stamps)), "a front image was planned on twice"
        assert set(stamps) <= set(sent)
        first = sent.index(stamps[0])
        assert len(stamps) >= len(sent[first:]) - 1  # (nearly) every image after the first plan got one
    finally:
        if feeder is not None:
            feeder.stop()
        ros.executor.remove_node(node)
        node.close()
        node.destroy_node()
