"""The closed loop over DDS: the simulator as a ROS node (``wam-diff2-drive --dds``: /clock, the sensor topics)
beside a real planner node process (the node's own code with the scripted test-double engine of
``node_helpers.py``, use_sim_time, a plan on each image), against the same episode in-process with the same
engine: the same plans, the ego paths within 5 cm, every output written, exit 0."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
LATENCY_MS = 300.0
SECONDS = 4.0


def _ground_truth(bag: Path) -> dict[float, tuple[float, float]]:
    from wam_diff2_ros.bag import BagReader

    with BagReader(bag) as reader:
        rows = [json.loads(m.msg.data) for m in reader.messages() if m.topic == "/sim/ground_truth"]
    return {row["t"]: (row["ego"]["x"], row["ego"]["y"]) for row in rows}


def test_dds_mode_matches_the_in_process_episode(tmp_path: Path) -> None:
    pytest.importorskip("rclpy", reason="rclpy is not importable")
    from conftest import subprocess_env
    from node_helpers import NodeProcess, ScriptedEngine, node_command, write_params

    from wam_diff2_ros.drive.episode import EpisodeOptions
    from wam_diff2_ros.drive.run import node_config, run_episode
    from wam_diff2_ros.drive.world import load_scenarios

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    spec = replace(load_scenarios("offset_left")[0], duration_s=SECONDS)
    config = node_config(str(model_dir), overrides={"planning.rate_hz": 0.0})
    local = run_episode(
        spec,
        EpisodeOptions(out=tmp_path / "local", latency_ms=LATENCY_MS, width=320, height=180, video=False),
        config,
        ScriptedEngine(),
        log=lambda _text: None,
    )

    params = write_params(
        tmp_path / "planner.yaml",
        {
            "model.path": str(model_dir),
            "use_sim_time": True,
            "planning.rate_hz": 0.0,
            "qos.image.reliability": "reliable",
            "qos.odometry.reliability": "reliable",
            "qos.acceleration.reliability": "reliable",
        },
    )
    remaps = []
    for role, topic in (
        ("image_0", "/camera/front/image_raw"),
        ("camera_info_0", "/camera/front/camera_info"),
        ("odometry", "/odom"),
        ("acceleration", "/imu/acceleration"),
        ("command", "/navigation/command"),
    ):
        remaps += ["-r", f"~/input/{role}:={topic}"]
    planner = NodeProcess(node_command([REPO / "config" / "wam_diff2.yaml", params], *remaps), tmp_path / "planner.log")
    try:
        sim = subprocess.run(
            [
                sys.executable,
                "-m",
                "wam_diff2_ros.cli.drive",
                "offset_left",
                "--dds",
                "--model",
                str(model_dir),
                "--out",
                str(tmp_path / "dds"),
                "--latency-ms",
                str(LATENCY_MS),
                "--duration",
                str(SECONDS),
                "--size",
                "320x180",
                "--no-video",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,
            env=subprocess_env(),
        )
    finally:
        planner_code = planner.stop()
    assert sim.returncode == 0, sim.stderr[-3000:] + planner.output()[-3000:]
    assert "offset_left (DDS): PDMS" in sim.stdout
    assert planner_code == 0, planner.output()[-3000:]

    dds = json.loads((tmp_path / "dds" / "score.json").read_text())
    assert dds["mode"] == "dds" and local.score["mode"] == "in-process"
    assert dds["plans"]["made"] == local.score["plans"]["made"] >= 6
    assert dds["plans"]["valid"] == local.score["plans"]["valid"], (dds["plans"], local.score["plans"])
    a, b = _ground_truth(tmp_path / "local" / "episode"), _ground_truth(tmp_path / "dds" / "episode")
    assert sorted(a) == sorted(b) and len(a) == round(SECONDS * 10) + 1
    gap = max(float(np.hypot(a[t][0] - b[t][0], a[t][1] - b[t][1])) for t in a)
    print(f"DDS vs in-process: largest ego position gap {gap:.6f} m over {len(a)} samples")
    assert gap < 0.05, gap
    assert (tmp_path / "dds" / "report.html").is_file()
