"""launch/closed_loop.launch.py with the stand-ins of ``test_launch.py`` (``launch`` is not installable here):
its arguments, the planner node's parameters and remaps, the simulator node, the shutdown on the simulator's exit;
then, for real, the two processes launch_ros would start from those actions (the planner with the scripted engine
of ``node_helpers.py``) run an episode over DDS: the simulator stops by itself, exits 0 and writes every output."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_launch import SIGNATURES, Recorded, command_line, context, stub_modules

REPO = Path(__file__).resolve().parents[1]
LAUNCH_FILE = REPO / "launch" / "closed_loop.launch.py"
# From the public sources (ros2/launch rolling, 2024-12): actions/emit_event.py EmitEvent(*, event),
# actions/register_event_handler.py RegisterEventHandler(event_handler), event_handlers/on_process_exit.py
# OnProcessExit(*, target_action, on_exit), events/shutdown.py Shutdown(*, reason).
EXTRA = {
    "EmitEvent": ((), ("event", "condition"), ("event",)),
    "RegisterEventHandler": (("event_handler",), ("condition",), ()),
    "OnProcessExit": ((), ("target_action", "on_exit"), ()),
    "Shutdown": ((), ("reason",), ()),
}


@pytest.fixture
def closed_loop(monkeypatch):
    for name, signature in EXTRA.items():
        monkeypatch.setitem(SIGNATURES, name, signature)
    modules = stub_modules()
    extra = {name: type(name, (Recorded,), {}) for name in EXTRA}
    modules["launch.actions"].EmitEvent = extra["EmitEvent"]
    modules["launch.actions"].RegisterEventHandler = extra["RegisterEventHandler"]
    import types

    modules["launch.event_handlers"] = types.ModuleType("launch.event_handlers")
    modules["launch.event_handlers"].OnProcessExit = extra["OnProcessExit"]
    modules["launch.events"] = types.ModuleType("launch.events")
    modules["launch.events"].Shutdown = extra["Shutdown"]
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("closed_loop_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _actions(module, **values):
    return module.launch_setup(context(module, **values))


def test_closed_loop_launch_actions(closed_loop) -> None:
    actions = _actions(closed_loop, scenario="left_r20", model_path="demo", out="/tmp/x", seed="5100")
    planner, sim = (a for a in actions if type(a).__name__ == "Node")
    assert planner.kwargs["executable"] == "wam_diff2_node"
    overrides = planner.kwargs["parameters"][1]
    assert overrides["use_sim_time"] is True and overrides["planning.rate_hz"] == 0.0
    assert overrides["model.path"] == "demo" and overrides["qos.image.reliability"] == "reliable"
    assert dict(planner.kwargs["remappings"])["~/input/image_0"] == "/camera/front/image_raw"
    assert sim.kwargs["executable"] == "wam-diff2-drive"
    assert sim.kwargs["arguments"][:2] == ["left_r20", "--dds"] and "--seed" in sim.kwargs["arguments"]
    (handler,) = (a for a in actions if type(a).__name__ == "RegisterEventHandler")
    on_exit = handler.args[0]
    assert on_exit.kwargs["target_action"] is sim
    assert type(on_exit.kwargs["on_exit"][0].kwargs["event"]).__name__ == "Shutdown"


@pytest.mark.ros
def test_closed_loop_launch_runs_an_episode_over_dds(closed_loop, tmp_path) -> None:
    pytest.importorskip("rclpy", reason="rclpy is not importable")
    from conftest import subprocess_env
    from node_helpers import SUPPORT_SCRIPT, NodeProcess

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    out = tmp_path / "out"
    actions = _actions(
        closed_loop,
        scenario="straight_10",
        model_path=str(model_dir),
        out=str(out),
        duration="3",
        size="320x180",
        latency_ms="300",
    )
    planner_action, sim_action = (a for a in actions if type(a).__name__ == "Node")
    planner_command = command_line(planner_action, tmp_path)
    planner_command[:1] = [sys.executable, str(SUPPORT_SCRIPT)]  # the node with the scripted engine
    sim_command = command_line(sim_action, tmp_path)
    assert Path(sim_command[0]).name == "wam-diff2-drive"
    sim_command[:1] = [sys.executable, "-m", "wam_diff2_ros.cli.drive"]  # the console script's module, this checkout
    planner = NodeProcess(planner_command, tmp_path / "planner.log")
    try:
        sim = subprocess.run(sim_command, capture_output=True, text=True, timeout=600, cwd=REPO, env=subprocess_env())
    finally:
        planner.stop()
    assert sim.returncode == 0, sim.stderr[-3000:] + planner.output()[-2000:]
    document = json.loads((out / "score.json").read_text())
    assert document["mode"] == "dds" and document["simulated_s"] == pytest.approx(3.0)
    assert document["plans"]["valid"] >= 4
    assert document["score"]["dac"] == 1.0
    for name in ("report.html", "bev.mp4", "episode/metadata.yaml"):
        assert (out / name).is_file()
