"""launch/wam_diff2_autoware.launch.py: the node in Autoware's end-to-end slot with Autoware's names.

Loaded with ``test_launch.py``'s signature-checked stand-ins for ``launch`` / ``launch_ros`` (not installable from
PyPI); then the node is started, for real, with the command line ``launch_ros`` builds from the Node action, and
checked over DDS: it subscribes Autoware's sensing, localization and turn-signal topics and publishes its
Trajectory and CandidateTrajectories where the launch puts them, with Autoware's message types.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from test_launch import REPO_ROOT, command_line, context, nodes, stub_modules

LAUNCH_FILE = REPO_ROOT / "launch" / "wam_diff2_autoware.launch.py"


@pytest.fixture
def launch_module(monkeypatch):
    for name, module in stub_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("wam_diff2_autoware_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_defaults_are_autowares_names_and_vads_qos(launch_module) -> None:
    ctx = context(launch_module)
    (node,) = nodes(launch_module.launch_setup(ctx))
    remaps = dict(node.kwargs["remappings"])
    assert remaps == {
        "~/input/image_0": "/sensing/camera/CAM_FRONT/image_raw",
        "~/input/camera_info_0": "/sensing/camera/CAM_FRONT/camera_info",
        "~/input/odometry": "/localization/kinematic_state",
        "~/input/acceleration": "/localization/acceleration",
        "~/input/turn_indicators": "/planning/turn_indicators_cmd",
        "~/output/autoware/trajectory": "/planning/trajectory",
        "~/output/autoware/candidates": "/planning/generator/wam_diff2/candidate_trajectories",
    }
    params_file, overrides = node.kwargs["parameters"]
    assert Path(params_file) == REPO_ROOT / "config" / "wam_diff2.yaml"
    assert overrides["autoware.outputs"] is True and overrides["command.source"] == "turn_indicators"
    assert overrides["use_sim_time"] is False and overrides["cameras.transports"] == ["raw"]
    assert overrides["qos.odometry.reliability"] == "reliable" and overrides["qos.image.reliability"] == "best_effort"
    assert overrides["qos.camera_info.depth"] == 10


def test_compressed_camera_sim_time_and_wheelbase(launch_module) -> None:
    ctx = context(launch_module, image_transport="compressed", use_sim_time="true", camera="CAM_F", wheelbase="3.1")
    (node,) = nodes(launch_module.launch_setup(ctx))
    remaps = dict(node.kwargs["remappings"])
    assert remaps["~/input/image_0"] == "/sensing/camera/CAM_F/image_raw/compressed"
    assert remaps["~/input/camera_info_0"] == "/sensing/camera/CAM_F/camera_info"
    overrides = node.kwargs["parameters"][1]
    assert overrides["cameras.transports"] == ["compressed"] and overrides["use_sim_time"] is True
    assert overrides["vehicle.wheelbase_m"] == 3.1
    with pytest.raises(RuntimeError, match="nothing was started: image_transport must be raw or compressed"):
        launch_module.launch_setup(context(launch_module, image_transport="h264"))


def test_command_source_takes_every_command_source_of_the_node(launch_module) -> None:
    from wam_diff2_ros.ros.params.specs import COMMAND_SOURCES

    (node,) = nodes(launch_module.launch_setup(context(launch_module)))
    overrides = node.kwargs["parameters"][1]
    assert overrides["command.default"] == "straight"  # plans while no turn signal arrives (no rule-based planner)
    declared = {name: text for name, _, text in launch_module.ARGUMENTS}
    assert all(source in declared["command_source"] for source in COMMAND_SOURCES)
    for source in COMMAND_SOURCES:  # route too, once the node has it: the launch reads the node's one list
        (node,) = nodes(launch_module.launch_setup(context(launch_module, command_source=source)))
        overrides, remaps = node.kwargs["parameters"][1], dict(node.kwargs["remappings"])
        assert overrides["command.source"] == source
        assert ("~/input/turn_indicators" in remaps) == (source == "turn_indicators")
    (node,) = nodes(launch_module.launch_setup(context(launch_module, command_source="fixed", command_default="left")))
    overrides, remaps = node.kwargs["parameters"][1], dict(node.kwargs["remappings"])
    assert overrides["command.source"] == "fixed" and overrides["command.default"] == "left"
    assert not [name for name in remaps if "command" in name or "turn_indicators" in name]  # no command input
    ctx = context(launch_module, command_source="topic", command_topic="/planning/navigation_command")
    (node,) = nodes(launch_module.launch_setup(ctx))
    assert dict(node.kwargs["remappings"])["~/input/command"] == "/planning/navigation_command"
    (node,) = nodes(launch_module.launch_setup(context(launch_module, command_default="")))
    assert "command.default" not in node.kwargs["parameters"][1]  # the params file's
    with pytest.raises(RuntimeError, match="nothing was started: command_source must be one of topic, "):
        launch_module.launch_setup(context(launch_module, command_source="gps"))
    with pytest.raises(RuntimeError, match="command_source fixed plans with command_default"):
        launch_module.launch_setup(context(launch_module, command_source="fixed", command_default=""))


@pytest.mark.ros
def test_launched_node_speaks_autowares_topics(launch_module, tmp_path) -> None:
    pytest.importorskip("rclpy", reason="rclpy is not importable")
    pytest.importorskip("autoware_planning_msgs", reason="autoware messages missing: run wam-diff2-build-interfaces")
    from core_helpers import tiny_checkpoint, wait_until
    from node_helpers import Harness, NodeProcess

    ctx = context(launch_module, model_path=str(tiny_checkpoint()), device="cpu", dtype="float32")
    (node_action,) = nodes(launch_module.launch_setup(ctx))
    command = command_line(node_action, tmp_path)
    harness = Harness("autoware_launch_test_harness")
    process = NodeProcess(command, tmp_path / "node.log")
    try:
        assert wait_until(lambda: harness.lifecycle_state("/wam_diff2", timeout=1.0) == "active", 90), process.output()
        for topic in (
            "/sensing/camera/CAM_FRONT/image_raw",
            "/sensing/camera/CAM_FRONT/camera_info",
            "/localization/kinematic_state",
            "/localization/acceleration",
            "/planning/turn_indicators_cmd",
        ):
            assert wait_until(lambda t=topic: harness.node.count_subscribers(t) >= 1), topic
        assert harness.node.count_subscribers("/wam_diff2/input/command") == 0  # the turn signal is the command
        assert wait_until(lambda: harness.node.count_publishers("/planning/trajectory") >= 1)
        assert wait_until(
            lambda: harness.node.count_publishers("/planning/generator/wam_diff2/candidate_trajectories") >= 1
        )
        topics = dict(harness.node.get_topic_names_and_types())
        assert topics["/planning/trajectory"] == ["autoware_planning_msgs/msg/Trajectory"]
        assert topics["/planning/generator/wam_diff2/candidate_trajectories"] == [
            "autoware_internal_planning_msgs/msg/CandidateTrajectories"
        ]
        assert topics["/planning/turn_indicators_cmd"] == ["autoware_vehicle_msgs/msg/TurnIndicatorsCommand"]
    finally:
        code = process.stop()
        harness.close()
    assert code == 0, process.output()
