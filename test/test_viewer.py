"""The live view without ROS: what a plan looks like (:func:`view_frame`: status, colours by confidence) and the
server (foxglove-sdk) seen by our own Foxglove WebSocket protocol client (:mod:`foxglove_client`); a client that
subscribes and then stops reading never blocks :meth:`LiveView.submit`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from test_planning import STAMP, make_frame, make_observation

from wam_diff2_ros.core.frames import EgoPose
from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.core.planning import PlanResult, StageTiming
from wam_diff2_ros.viewer import TOPICS, LiveView, PlanUpdate, ViewerSettings, view_frame
from wam_diff2_ros.viewer.scene import STATUS_COLORS, confidence_color

pytestmark = pytest.mark.core

ANSWER = "2.0, 0.0, 4.0, 0.5, 6.0, 1.5, 8.0, 3.0, 9.5, 5.0, 10.5, 7.5, 11.0, 10.0, 11.0, 12.5"
CONFIDENCE = (1.0, 0.9, 0.8, 0.6, 0.5, 0.3, 0.1, 0.0)


@dataclass(frozen=True)
class ConfidentPlan(PlanResult):
    """A plan whose decoder reported confidence (the fields PlannedTrajectory carries)."""

    waypoint_confidence: tuple[float, ...] = ()
    confidence: float | None = None


def plan(text: str = ANSWER, confidence: tuple[float, ...] = (), pose: EgoPose | None = None) -> PlanResult:
    parsed = parse_waypoints(text)
    observation = replace(make_observation(frames=[make_frame(width=640, height=360)]), ego_pose=pose)
    return ConfidentPlan(
        observation=observation,
        prompt="the prompt",
        raw_text=text,
        valid=parsed.valid,
        reason=parsed.reason,
        waypoints=parsed.waypoints,
        timing=StageTiming(1.0, 2.0, 3.0, 4.0, 5.0, 15.0, 42.0),
        steps_per_block=(4, 3),
        finished=True,
        model="tiny",
        waypoint_confidence=confidence,
        confidence=min(confidence) if confidence else None,
    )


def test_statuses_are_drawn_differently() -> None:
    valid = view_frame(PlanUpdate(STAMP, plan()))
    rejected = view_frame(PlanUpdate(STAMP, plan("I cannot see the road")))
    stale_result = replace(plan(), valid=False, waypoints=(), reason="stale plan: 2.00 s old")
    stale = view_frame(PlanUpdate(STAMP, stale_result, stale=True))
    blocked = view_frame(PlanUpdate(STAMP + 7, None, problems=("odometry: no message yet",)))
    assert [f.status for f in (valid, rejected, stale, blocked)] == ["valid", "rejected", "stale", "blocked"]
    assert valid.colors == (STATUS_COLORS["valid"],) * 8 and len(valid.waypoints) == 8
    assert rejected.waypoints == () and rejected.reason and rejected.info["valid"] is False
    assert stale.reason.startswith("stale plan") and stale.info["status"] == "stale"
    assert blocked.stamp_ns == STAMP + 7 and blocked.reason == "odometry: no message yet"
    assert len({STATUS_COLORS[s] for s in STATUS_COLORS}) == 4


def test_waypoints_coloured_by_confidence_when_the_decoder_gives_it() -> None:
    frame = view_frame(PlanUpdate(STAMP, plan(confidence=CONFIDENCE)))
    assert frame.confidence == CONFIDENCE
    assert frame.colors == tuple(confidence_color(c) for c in CONFIDENCE)
    assert frame.colors[0][:2] == (0.0, 1.0) and frame.colors[-1][:2] == (1.0, 0.0)  # green → red
    assert frame.info["confidence"] == 0.0 and frame.info["waypoint_confidence"] == list(CONFIDENCE)
    mismatched = view_frame(PlanUpdate(STAMP, plan(confidence=(0.5,))))  # not one per waypoint: ignored
    assert mismatched.confidence == () and mismatched.colors == (STATUS_COLORS["valid"],) * 8


def test_fixed_frame_plan_follows_the_ego_pose() -> None:
    pose = EgoPose("map", 10.0, -3.0, 0.0, np.pi / 2)
    frame = view_frame(PlanUpdate(STAMP, plan(pose=pose)))
    assert frame.fixed_frame == "map" and frame.ego_pose == (10.0, -3.0, np.pi / 2)
    np.testing.assert_allclose(frame.waypoints_fixed[0], (10.0, -1.0), atol=1e-12)  # (2, 0) ahead = +y in map


@pytest.fixture
def view_and_client():
    pytest.importorskip("foxglove", reason="the live view needs foxglove-sdk (pip install '.[viewer]')")
    pytest.importorskip("websockets", reason="the protocol client needs websockets (pip install '.[test]')")
    pytest.importorskip("google.protobuf", reason="decoding needs protobuf (pip install '.[test]')")
    from foxglove_client import FoxgloveClient

    view = LiveView(ViewerSettings(0))
    view.start()
    client = FoxgloveClient(view.url)
    yield view, client
    client.close()
    view.close()


def test_server_sends_confidence_colours_and_rejections(view_and_client) -> None:
    view, client = view_and_client
    assert view.settings.host == "127.0.0.1" and view.url.startswith("ws://127.0.0.1:")
    client.subscribe([TOPICS["plan"], TOPICS["info"], TOPICS["log"]])
    assert view.wait_for_subscribers([TOPICS["plan"], TOPICS["info"], TOPICS["log"]], 60)
    view.submit(PlanUpdate(STAMP, plan(confidence=CONFIDENCE)))
    assert client.wait_for(lambda c: len(c.messages(TOPICS["plan"])) == 1)
    view.submit(PlanUpdate(STAMP + 1, replace(plan("no plan here"), observation=make_observation())))
    assert client.wait_for(lambda c: len(c.messages(TOPICS["plan"])) == 2 and c.messages(TOPICS["log"]))
    first, second = (m.message.entities[0] for m in client.messages(TOPICS["plan"]))
    colors = [(c.r, c.g, c.b, c.a) for c in first.lines[0].colors]
    np.testing.assert_allclose(colors[1:], [confidence_color(c) for c in CONFIDENCE], atol=1e-6)
    np.testing.assert_allclose([[s.color.r, s.color.g] for s in first.spheres], [[c[0], c[1]] for c in colors[1:]])
    assert not second.lines and second.texts[0].text.startswith("rejected: ")
    assert second.texts[0].color.r == pytest.approx(STATUS_COLORS["rejected"][0])
    infos = [m.message for m in client.messages(TOPICS["info"])]
    assert [i["status"] for i in infos] == ["valid", "rejected"]
    assert infos[0]["waypoint_confidence"] == list(CONFIDENCE)
    (log,) = client.messages(TOPICS["log"])
    assert log.message.message.startswith("rejected: ")


def test_a_client_that_stops_reading_never_blocks_submit() -> None:
    pytest.importorskip("foxglove", reason="the live view needs foxglove-sdk (pip install '.[viewer]')")
    websockets = pytest.importorskip("websockets.sync.client", reason="needs websockets (pip install '.[test]')")
    view = LiveView(ViewerSettings(0, image_max_hz=1000.0, message_backlog=8))
    view.start()
    stalled = websockets.connect(view.url, subprotocols=["foxglove.sdk.v1", "foxglove.websocket.v1"]).__enter__()
    try:
        channels: list[dict] = []
        while len(channels) < len(TOPICS):
            message = json.loads(stalled.recv(timeout=60))
            channels += message.get("channels", [])
        stalled.send(
            json.dumps({"op": "subscribe", "subscriptions": [{"id": c["id"], "channelId": c["id"]} for c in channels]})
        )
        assert view.wait_for_subscribers(list(TOPICS.values()), 60)
        big = plan()
        big = replace(big, observation=replace(big.observation, frames=(make_frame(width=1280, height=720),)))
        for k in range(400):  # the client reads nothing from here on
            view.submit(PlanUpdate(STAMP + k, big))
        view.close()  # returns: the drawing thread was never stuck on the client either
        assert view.submitted == 400 and view.drawn + view.dropped == 400 and view.drawn >= 1
    finally:
        stalled.close()
        view.close()


def test_the_shipped_layout_shows_the_view_topics() -> None:
    layout = json.loads((Path(__file__).resolve().parents[1] / "config" / "foxglove_layout.json").read_text())
    panels = layout["configById"]

    def leaves(node: object) -> list[str]:
        return [node] if isinstance(node, str) else [*leaves(node["first"]), *leaves(node["second"])]

    assert sorted(leaves(layout["layout"])) == sorted(panels)  # every panel placed, none without a config
    referenced = set()
    for config in panels.values():
        referenced |= set(config.get("topics", {}))
        referenced |= {config[k] for k in ("topicPath", "topicToRender") if k in config}
        referenced |= {v for k, v in config.get("imageMode", {}).items() if k.endswith("Topic")}
        referenced |= {p["value"].split(".")[0] for p in config.get("paths", [])}
    assert referenced == set(TOPICS.values()) - {TOPICS["tf"]}  # /tf places the plan; no panel lists it
    assert {p["value"] for c in panels.values() for p in c.get("paths", [])} >= {
        "/wam_diff2/plan_info.timing.total_ms",
        "/wam_diff2/plan_info.confidence",
    }
    assert panels["3D!wamscene"]["followTf"] == "base_link"


def test_closing_frees_the_port_at_once() -> None:
    """foxglove's stop returns before its listener closes; the view's close waits for it, so the same port can be
    served again straight away (a node reconfigured on its viewer.port) and nothing listens after close."""
    import socket

    pytest.importorskip("foxglove", reason="the live view needs foxglove-sdk (pip install '.[viewer]')")
    pytest.importorskip("websockets", reason="the protocol client needs websockets (pip install '.[test]')")
    from foxglove_client import FoxgloveClient

    port = 0
    for _ in range(10):
        view = LiveView(ViewerSettings(port))
        port = view.start()
        client = FoxgloveClient(view.url)  # a client came and went
        assert client.wait_for_channels(TOPICS.values())
        client.close()
        view.close()
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
            pass


# --- the published client (@foxglove/ws-protocol from npm) --------------------------------------------------

NPM_CLIENT = Path(__file__).resolve().parent / "foxglove_ws_protocol"


class NpmClient:
    """``test/foxglove_ws_protocol/client.mjs`` in node: @foxglove/ws-protocol's ``FoxgloveClient`` offering
    ``subprotocols``; its events (JSON lines) collected by a thread."""

    def __init__(self, url: str, subprotocols: str, topics: list[str]) -> None:
        import shutil
        import subprocess
        import threading

        node, npm = shutil.which("node"), shutil.which("npm")
        if node is None or npm is None:
            pytest.skip("node and npm are needed to run the published Foxglove client (@foxglove/ws-protocol)")
        if not (NPM_CLIENT / "node_modules" / "@foxglove" / "ws-protocol").is_dir():  # .ci/run installs it too
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NPM_CLIENT, check=True, timeout=600)
        command = [node, str(NPM_CLIENT / "client.mjs"), url, subprotocols, *topics]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.events: list[dict] = []
        self.exited = False
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self.changed:
                self.events.append(json.loads(line))
                self.changed.notify_all()
        with self.changed:
            self.exited = True
            self.changed.notify_all()

    def wait_for(self, predicate, timeout_s: float = 60.0) -> bool:
        """Wait until ``predicate(events)`` holds (False at once if the client exited without it)."""
        with self.changed:
            self.changed.wait_for(lambda: predicate(self.events) or self.exited, timeout_s)
            return bool(predicate(self.events))

    def messages(self, topic: str) -> list[dict]:
        with self.changed:
            return [e for e in self.events if e["event"] == "message" and e["topic"] == topic]

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(30)
        finally:
            if self.process.poll() is None:
                self.process.kill()


def test_the_published_foxglove_client_offering_both_subprotocols_sees_the_plan() -> None:
    """Foxglove's own client library, as its README uses it, offering ``foxglove.websocket.v1`` and
    ``foxglove.sdk.v1`` (what Foxglove apps and Lichtblick >= 1.22.1 offer): the view speaks ``foxglove.sdk.v1``."""
    pytest.importorskip("foxglove", reason="the live view needs foxglove-sdk (pip install '.[viewer]')")
    view = LiveView(ViewerSettings(0))
    view.start()
    client = NpmClient(view.url, "foxglove.websocket.v1,foxglove.sdk.v1", [TOPICS["plan"], TOPICS["info"]])
    try:
        assert client.wait_for(lambda events: any(e["event"] == "open" for e in events)), client.events
        assert [e["protocol"] for e in client.events if e["event"] == "open"] == ["foxglove.sdk.v1"]
        assert view.wait_for_subscribers([TOPICS["plan"], TOPICS["info"]], 60)
        view.submit(PlanUpdate(STAMP, plan(confidence=CONFIDENCE)))
        assert client.wait_for(lambda _: client.messages(TOPICS["plan"]) and client.messages(TOPICS["info"]))
        (scene,) = client.messages(TOPICS["plan"])
        assert (scene["schemaName"], scene["encoding"], int(scene["logTime"])) == (
            "foxglove.SceneUpdate",
            "protobuf",
            STAMP,
        )
        assert scene["size"] > 100
        (info,) = client.messages(TOPICS["info"])
        assert info["json"]["status"] == "valid" and info["json"]["waypoint_confidence"] == list(CONFIDENCE)
        assert not [e for e in client.events if e["event"] == "error"], client.events
    finally:
        client.close()
        view.close()


def test_a_client_offering_only_the_old_subprotocol_is_refused() -> None:
    """foxglove-sdk accepts ``foxglove.sdk.v1`` only: a client offering just ``foxglove.websocket.v1`` (Lichtblick
    before 1.22.1, foxglove_bridge-era clients) is refused in the handshake (HTTP 400); docs/viewer.md says so."""
    pytest.importorskip("foxglove", reason="the live view needs foxglove-sdk (pip install '.[viewer]')")
    view = LiveView(ViewerSettings(0))
    view.start()
    client = NpmClient(view.url, "foxglove.websocket.v1", [TOPICS["plan"]])
    try:
        assert client.wait_for(lambda events: any(e["event"] in ("refused", "open") for e in events)), client.events
        first = next(e for e in client.events if e["event"] in ("refused", "open"))
        assert first == {"event": "refused", "status": 400}
    finally:
        client.close()
        view.close()
