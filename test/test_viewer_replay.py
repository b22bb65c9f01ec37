"""``wam-diff2-replay --serve`` seen by a real client: the replay serves the live view (foxglove-sdk's server),
a client of our own speaking Foxglove's WebSocket protocol (:mod:`foxglove_client`) subscribes, decodes the
protobuf / JSON messages and finds the plans the node's runtime produced (``predictions.jsonl``): the same
waypoints in base_link and in the odometry's frame, the same stamps, the image and the transforms.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")
pytest.importorskip("foxglove", reason="the live view needs foxglove-sdk (pip install '.[viewer]')")
pytest.importorskip("websockets", reason="the protocol client needs websockets (pip install '.[test]')")
pytest.importorskip("google.protobuf", reason="decoding needs protobuf (pip install '.[test]')")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from foxglove_client import SUBPROTOCOLS, FoxgloveClient
from listening import Listener, listening_sockets
from scripted_engine import ScriptedEngine

from wam_diff2_ros.replay import EXIT_OK, ReplayOptions, replay
from wam_diff2_ros.viewer import TOPICS

WAIT_S = 120.0


@pytest.fixture(scope="module")
def sample_bag(tmp_path_factory) -> Path:
    from wam_diff2_ros.sim import make_sample_bag

    return make_sample_bag(tmp_path_factory.mktemp("sample") / "drive", seconds=4.0, width=320, height=180).path


@pytest.fixture(scope="module")
def served(sample_bag, tmp_path_factory) -> tuple[Any, FoxgloveClient, Path, set[Listener]]:
    """The replay with ``--serve 0 --serve-speed 0`` and a client subscribed to every channel; the sockets that
    listened on the view's port."""
    out = tmp_path_factory.mktemp("served") / "run"
    options = ReplayOptions(
        bag=sample_bag, out=out, model=str(out.parent), progress=False, serve_port=0, serve_speed=0.0
    )
    url: list[str] = []
    ready = threading.Event()

    def log(text: str) -> None:
        found = re.search(r"live view: (ws://\S+)", text)
        if found:
            url.append(found.group(1))
            ready.set()

    result: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: result.update(r=replay(options, engine_factory=lambda c: ScriptedEngine(c), log=log)),
        daemon=True,
    )
    thread.start()
    assert ready.wait(WAIT_S), "the replay never announced its live view"
    port = int(url[0].rsplit(":", 1)[1])
    listeners = {s for s in listening_sockets({os.getpid()}) if s.port == port}  # while it waits for a client
    client = FoxgloveClient(url[0])
    client.subscribe(TOPICS.values())  # the replay starts once a client subscribes
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the replay did not finish"
    # the server stops once the replay ends: the reader thread ends when the connection closes
    client._thread.join(WAIT_S)
    return result["r"], client, out, listeners


def _records(out: Path) -> dict[int, dict[str, Any]]:
    lines = (out / "predictions.jsonl").read_text().splitlines()
    return {r["stamp_ns"]: r for r in map(json.loads, lines) if r["status"] == "planned"}


def _stamp_ns(stamp: Any) -> int:
    return stamp.seconds * 10**9 + stamp.nanos  # google.protobuf.Timestamp


def test_client_speaks_the_offered_subprotocol(served) -> None:
    result, client, _, _ = served
    assert result.exit_code == EXIT_OK
    assert client.subprotocol in SUBPROTOCOLS
    assert client.server_info["op"] == "serverInfo" and client.server_info["name"] == "wam-diff2-replay"
    schemas = {c["topic"]: c["schemaName"] for c in client.channels.values()}
    assert schemas[TOPICS["plan"]] == schemas[TOPICS["plan_fixed"]] == "foxglove.SceneUpdate"
    assert schemas[TOPICS["image"]] == "foxglove.CompressedImage"
    assert schemas[TOPICS["tf"]] == "foxglove.FrameTransforms"
    assert schemas[TOPICS["calibration"]] == "foxglove.CameraCalibration"


def test_the_view_listens_on_loopback_by_default(served) -> None:
    *_, listeners = served
    assert listeners and all(s.loopback for s in listeners), sorted(map(str, listeners))


def test_received_plans_equal_the_runtime_plans(served) -> None:
    _, client, out, _ = served
    records = _records(out)
    infos = client.messages(TOPICS["info"])
    scenes = client.messages(TOPICS["plan"])
    assert infos and scenes  # the last plan is always drawn (the view drains its mailbox on close)
    assert {m.message["stamp_ns"] for m in infos} <= set(records)
    for received in infos:
        info = received.message
        record = records[info["stamp_ns"]]
        assert received.log_time_ns == info["stamp_ns"]  # timestamps are the image stamps
        assert info["status"] == "valid" and record["valid"] is True
        assert info["waypoints"] == record["waypoints"]
        assert info["command"] == record["command"]
        assert info["steps_per_block"] == record["steps_per_block"]
        assert info["timing"]["total_ms"] == record["timing"]["total_ms"]
        assert info["timing"]["schedule_delay_ms"] == record["timing"]["schedule_delay_ms"]
        assert "end_to_end_ms" not in info["timing"]  # a replay's plan info never calls the tick gap end-to-end
        assert info["waypoint_confidence"] == (record.get("waypoint_confidence") or [])
    for received in scenes:
        (entity,) = [e for e in received.message.entities if e.id == "plan"]
        record = records[_stamp_ns(entity.timestamp)]
        assert entity.frame_id == "base_link"
        (line,) = entity.lines
        drawn = [[p.x, p.y] for p in line.points]
        assert drawn[0] == [0.0, 0.0]  # the path starts at the ego
        np.testing.assert_allclose(drawn[1:], record["waypoints"], atol=1e-9)
        assert len(entity.spheres) == len(record["waypoints"])


def test_fixed_frame_plan_transforms_and_ego_path(served) -> None:
    _, client, out, _ = served
    records = _records(out)
    fixed = client.messages(TOPICS["plan_fixed"])
    assert fixed
    for received in fixed:
        entities = {e.id: e for e in received.message.entities}
        plan = entities["plan"]
        record = records[_stamp_ns(plan.timestamp)]
        assert plan.frame_id == record["fixed_frame"] == "odom"
        drawn = [[p.x, p.y] for p in plan.lines[0].points][1:]
        np.testing.assert_allclose(drawn, record["waypoints_fixed"], atol=1e-6)
    last = {e.id: e for e in fixed[-1].message.entities}
    assert len(last["ego_path"].lines[0].points) >= 2  # the recent ego path
    transforms = client.messages(TOPICS["tf"])
    assert transforms
    for received in transforms:
        (ego,) = [t for t in received.message.transforms if t.child_frame_id == "base_link"]
        record = records[_stamp_ns(ego.timestamp)]
        assert ego.parent_frame_id == "odom"
        # the transform places base_link so that waypoint 1 lands where the fixed-frame plan has it
        yaw = 2 * math.atan2(ego.rotation.z, ego.rotation.w)
        x, y = record["waypoints"][0]
        fx = ego.translation.x + math.cos(yaw) * x - math.sin(yaw) * y
        fy = ego.translation.y + math.sin(yaw) * x + math.cos(yaw) * y
        np.testing.assert_allclose([fx, fy], record["waypoints_fixed"][0], atol=1e-6)


def test_camera_image_is_a_jpeg_of_the_front_frame(served) -> None:
    import cv2

    _, client, out, _ = served
    records = _records(out)
    images = client.messages(TOPICS["image"])
    assert images  # the first plan's image at least (the rate cap keeps later ones out of a fast replay)
    for received in images:
        image = received.message
        assert image.format == "jpeg"
        assert _stamp_ns(image.timestamp) in records
        decoded = cv2.imdecode(np.frombuffer(image.data, np.uint8), cv2.IMREAD_COLOR)
        assert decoded.shape == (180, 320, 3)
    (calibration,) = client.messages(TOPICS["calibration"])[:1]
    assert calibration.message.width == 320 and calibration.message.height == 180
    assert calibration.message.frame_id == images[0].message.frame_id


def test_diagnostics_count_every_plan(served) -> None:
    _, client, out, _ = served
    diagnostics = client.messages(TOPICS["diagnostics"])
    assert diagnostics
    last = diagnostics[-1].message
    assert last["submitted"] == len(_records(out))
    assert last["drawn"] + last["dropped_updates"] == last["submitted"]
    assert last["level"] == "OK" and last["num_valid"] == last["drawn"]
