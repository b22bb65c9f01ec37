"""What the live view costs the planning thread, and its memory with a client that stops reading.

    OMP_NUM_THREADS=1 wam-diff2-bench viewer --plans 400 --stall-s 60

1. cost: a stand-in for planning (a float32 matrix product loop of about --work-ms on one thread, as a decode
   step is) runs --plans times with the view off, then on with a client reading every channel; each plan hands a
   1280x720 frame and 8 waypoints to the view. Prints the hand-off time (``LiveView.submit``) and the planning
   step's wall time off vs on (the view's drawing thread shares the GIL and the cores).
2. stall: a client subscribes to every channel and never reads again; plans arrive at 10 Hz for --stall-s
   seconds; prints the process RSS every 5 s (the server drops, it does not queue).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import numpy as np

from wam_diff2_ros.core.camera import CameraFrame, CameraIntrinsics
from wam_diff2_ros.core.frames import EgoPose
from wam_diff2_ros.core.observation import Observation
from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.core.planning import PlanResult, StageTiming
from wam_diff2_ros.core.prompts import NavigationCommand
from wam_diff2_ros.viewer import TOPICS, LiveView, PlanUpdate, ViewerSettings

STAMP = 1_700_000_000 * 10**9
ANSWER = "2.0, 0.0, 4.0, 0.5, 6.0, 1.5, 8.0, 3.0, 9.5, 5.0, 10.5, 7.5, 11.0, 10.0, 11.0, 12.5"


def plan(k: int, image: np.ndarray) -> PlanResult:
    frame = CameraFrame("front", 0, STAMP + k, STAMP + k, "front_optical", image,
                        CameraIntrinsics.pinhole_fallback(image.shape[1], image.shape[0], 70.0))  # fmt: skip
    observation = Observation(STAMP + k * 10**8, (frame,), NavigationCommand.LEFT, "topic", (8.0, 0.0), (0.0, 0.0),
                              "topic", STAMP, ego_pose=EgoPose("odom", 0.8 * k, 0.0, 0.0, 0.0))  # fmt: skip
    parsed = parse_waypoints(ANSWER)
    return PlanResult(observation, "prompt", ANSWER, True, "", parsed.waypoints, StageTiming(total_ms=400.0),
                      (4, 3), True, "measure")  # fmt: skip


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def subscribe_all(url: str, keep_reading: bool) -> tuple[object, threading.Thread | None]:
    from websockets.sync.client import connect

    # no keepalive: a stalled client must stay connected (its pings would time out and close it)
    ws = connect(url, subprotocols=["foxglove.sdk.v1", "foxglove.websocket.v1"], max_size=None, ping_interval=None)
    ws = ws.__enter__()
    channels: list[dict] = []
    while len(channels) < len(TOPICS):
        channels += json.loads(ws.recv(timeout=30)).get("channels", [])
    subscriptions = [{"id": c["id"], "channelId": c["id"]} for c in channels]
    ws.send(json.dumps({"op": "subscribe", "subscriptions": subscriptions}))
    if not keep_reading:
        return ws, None

    def drain() -> None:
        try:
            for _ in ws:
                pass
        except Exception:
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return ws, reader


def work(a: np.ndarray, ms: float) -> None:
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        a @ a


def cost(plans: int, work_ms: float) -> None:
    image = np.random.default_rng(0).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    a = np.random.default_rng(1).random((256, 256), dtype=np.float32)
    results = [plan(k, image) for k in range(plans)]
    walls: dict[str, list[float]] = {"off": [], "on": []}
    handoff: list[float] = []
    for mode in ("off", "on"):
        view = None
        if mode == "on":
            view = LiveView(ViewerSettings(0))
            view.start()
            ws, _ = subscribe_all(view.url, keep_reading=True)
            view.wait_for_subscribers(list(TOPICS.values()), 30)
        for k in range(plans):
            started = time.perf_counter()
            work(a, work_ms)
            if view is not None:
                before = time.perf_counter()
                view.submit(PlanUpdate(STAMP + k, results[k]))
                handoff.append((time.perf_counter() - before) * 1e6)
            walls[mode].append((time.perf_counter() - started) * 1000.0)
        if view is not None:
            view.close()
            ws.close()
            print(f"view on: {view.submitted} submitted, {view.drawn} drawn, {view.dropped} replaced before drawn")
    ordered = sorted(handoff)
    print(f"hand-off (submit) on the planning thread: p50 {ordered[len(ordered) // 2]:.1f} µs, "
          f"p99 {ordered[int(0.99 * len(ordered))]:.1f} µs, max {ordered[-1]:.1f} µs")  # fmt: skip
    off, on = statistics.mean(walls["off"]), statistics.mean(walls["on"])
    print(f"planning step ({work_ms:g} ms of work) wall: view off {off:.2f} ms, on {on:.2f} ms "
          f"(+{on - off:.2f} ms per plan, ratio {on / off:.3f})")  # fmt: skip


def stall(seconds: float) -> None:
    image = np.random.default_rng(0).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    view = LiveView(ViewerSettings(0, image_max_hz=10.0))
    view.start()
    ws, _ = subscribe_all(view.url, keep_reading=False)
    view.wait_for_subscribers(list(TOPICS.values()), 30)
    start, k, next_report = time.monotonic(), 0, 0.0
    while (elapsed := time.monotonic() - start) < seconds:
        if elapsed >= next_report:
            print(f"t={elapsed:5.1f} s  RSS {rss_mb():7.1f} MB  submitted {view.submitted}  drawn {view.drawn}")
            next_report += 5.0
        view.submit(PlanUpdate(STAMP + k, plan(k, image)))
        k += 1
        time.sleep(0.1)
    print(f"t={time.monotonic() - start:5.1f} s  RSS {rss_mb():7.1f} MB  submitted {view.submitted}")
    view.close()
    ws.close()


def main(argv: list[str] | None = None) -> int:
    """`wam-diff2-bench viewer`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="wam-diff2-bench viewer", description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=400)
    parser.add_argument("--work-ms", type=float, default=50.0)
    parser.add_argument("--stall-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    cost(args.plans, args.work_ms)
    if args.stall_s > 0:
        stall(args.stall_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
