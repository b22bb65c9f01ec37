"""Does a decoding deadline hold while the node is flooded with camera images? (docs/confidence.md)

    OMP_NUM_THREADS=2 wam-diff2-bench flood --out /tmp/flood --seconds 180

Real node (``wam_diff2_node``, demo model on the CPU unless ``--model``), real DDS, three processes: the node, a
sensor process (this module with ``--publish``: ``--cameras`` raw rgb8 cameras of ``--width`` x ``--height`` at
``--rate-hz`` each, odometry at 50 Hz, a command at 2 Hz) and this process, which collects the plans and the
diagnostics and samples the node's RSS every second.

1. idle: the front camera alone at ``--idle-rate-hz``, no deadline: ``--idle-plans`` plans; their median total time
   x ``--deadline-factor`` (1.2) becomes the deadline (or ``--deadline-ms``).
2. flood: every camera at ``--rate-hz`` for ``--seconds``, the node subscribed to all of them (``cameras.names``) and
   planning on the front one (``planning.cameras: [front]``), with the deadline. Prints and writes
   (``flood.json``): plans, deadline met, valid, time per plan, steps per block, early tokens, images sent and
   received per camera, RSS over time.

DDS is kept on this machine (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``, a domain of its own unless
``ROS_DOMAIN_ID`` is set); the package's Fast DDS profile is used for the large frames.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

CAMERAS = ("front", "front_left", "front_right", "back_left", "back_right", "back")
NS = "/flood"


def _environment() -> None:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
    from wam_diff2_ros.ros.dds import ensure_fastdds_profile

    ensure_fastdds_profile()


def publish(args: argparse.Namespace) -> None:
    """The sensor process: cameras, odometry and command until killed; prints what it sent every 5 s."""
    import math

    import numpy as np
    import rclpy
    from nav_msgs.msg import Odometry
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from wam_diff2_ros.sim.render import render_frames

    rclpy.init()
    node = rclpy.create_node("flood_sensors")
    frame = render_frames(seed=0, width=args.width, height=args.height, stamps_s=(1.0,))[0]
    pixels = np.ascontiguousarray(frame).tobytes()
    cameras = CAMERAS[: args.cameras]
    images = [node.create_publisher(Image, f"{NS}/wam_diff2/input/image_{i}", qos_profile_sensor_data) for i in
              range(len(cameras))]  # fmt: skip
    messages = []  # built once: a camera driver's frames cost it no Python copy per message either
    for name in cameras:
        msg = Image(height=args.height, width=args.width, encoding="rgb8", step=args.width * 3, data=pixels)
        msg.header.frame_id = f"{name}_optical"
        messages.append(msg)
    odometry = node.create_publisher(Odometry, f"{NS}/wam_diff2/input/odometry", 10)
    command = node.create_publisher(String, f"{NS}/wam_diff2/input/command", 10)
    sent = [0] * len(cameras)
    period = {"image": 1.0 / args.rate_hz, "odometry": 0.02, "command": 0.5}
    due = dict.fromkeys(period, time.monotonic())
    last_report = time.monotonic()
    while rclpy.ok():
        now = time.monotonic()
        stamp = node.get_clock().now().to_msg()
        if now >= due["odometry"]:
            due["odometry"] += period["odometry"]
            msg = Odometry()
            msg.header.stamp, msg.header.frame_id, msg.child_frame_id = stamp, "odom", "base_link"
            msg.twist.twist.linear.x = args.speed
            msg.pose.pose.orientation.w = math.cos(0.0)
            odometry.publish(msg)
        if now >= due["command"]:
            due["command"] += period["command"]
            command.publish(String(data="straight"))
        if now >= due["image"]:
            due["image"] += period["image"]
            for index, (publisher, msg) in enumerate(zip(images, messages, strict=True)):
                msg.header.stamp = stamp
                publisher.publish(msg)
                sent[index] += 1
            if due["image"] < now:  # cannot keep the rate: do not burst to catch up
                due["image"] = now + period["image"]
        if now - last_report >= 5.0:
            last_report = now
            print(json.dumps({"t": round(now, 3), "sent": sent}), flush=True)
        time.sleep(max(0.0, min(due.values()) - time.monotonic()))


class Observer:
    """This process' side: the node's trajectories and diagnostics over DDS."""

    def __init__(self) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor

        from wam_diff2_ros.ros.outputs import own_messages

        msgs, problem = own_messages()
        if msgs is None:
            raise SystemExit(f"the package's messages do not import: {problem}")
        rclpy.init()
        self.node = rclpy.create_node("flood_observer")
        self.plans: list[dict[str, Any]] = []
        self.received: list[tuple[float, dict[str, int]]] = []
        self.lock = threading.Lock()
        self.node.create_subscription(msgs.PlannedTrajectory, f"{NS}/wam_diff2/output/trajectory", self._plan, 50)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._diagnostics, 50)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _plan(self, msg: Any) -> None:
        with self.lock:
            self.plans.append({
                "at": time.monotonic(),
                "valid": bool(msg.valid),
                "reason": msg.invalid_reason,
                "total_ms": float(msg.timing.total_ms),
                "end_to_end_ms": float(msg.timing.end_to_end_ms),
                "deadline_ms": float(msg.deadline_ms),
                "deadline_met": bool(msg.deadline_met),
                "early_tokens": int(msg.early_tokens),
                "steps_per_block": [int(s) for s in msg.denoising_steps_per_block],
                "confidence": float(msg.confidence),
            })  # fmt: skip

    def _diagnostics(self, array: Any) -> None:
        for status in array.status:
            if status.name.endswith(": inputs"):
                counts = {kv.key[: -len(" received")]: int(kv.value) for kv in status.values
                          if kv.key.endswith(" received") and kv.value.isdigit()}  # fmt: skip
                with self.lock:
                    self.received.append((time.monotonic(), counts))

    def snapshot(self) -> tuple[list[dict[str, Any]], list[tuple[float, dict[str, int]]]]:
        with self.lock:
            return list(self.plans), list(self.received)

    def clear(self) -> None:
        with self.lock:
            self.plans.clear()
            self.received.clear()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_node(args: argparse.Namespace, out: Path, name: str, values: dict[str, Any]) -> subprocess.Popen:
    import yaml

    params = out / f"{name}.yaml"
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}), encoding="utf-8")
    node = Path(sys.executable).with_name("wam_diff2_node")
    command = [str(node), "--ros-args", "--params-file", str(params), "-r", f"__ns:={NS}"]
    log = (out / f"{name}_node.log").open("wb")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def sensors(args: argparse.Namespace, out: Path, name: str, cameras: int, rate_hz: float) -> subprocess.Popen:
    command = [sys.executable, "-m", "wam_diff2_ros.bench.flood", "--publish", "--cameras", str(cameras),
               "--rate-hz", str(rate_hz), "--width", str(args.width), "--height", str(args.height),
               "--speed", str(args.speed)]  # fmt: skip
    return subprocess.Popen(command, stdout=(out / f"{name}_sensors.log").open("wb"), stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen) -> None:
    import signal

    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def node_values(args: argparse.Namespace, cameras: int, deadline_ms: float) -> dict[str, Any]:
    return {
        "model.path": args.model, "model.device": args.device, "model.dtype": args.dtype, "model.warmup": True,
        "model.warmup_image_size": [args.width, args.height],
        "cameras.names": list(CAMERAS[:cameras]), "planning.cameras": ["front"],
        "planning.rate_hz": args.plan_rate_hz, "planning.max_plan_age_s": 30.0,
        "decoding.deadline_ms": deadline_ms, "diagnostics.period_s": 1.0,
    }  # fmt: skip


def phase(args, out, observer, name, cameras, rate_hz, deadline_ms, until) -> dict[str, Any]:
    """One node run fed by one sensor process; ``until(plans, elapsed)`` ends it. Returns what was seen."""
    observer.clear()
    node = run_node(args, out, name, node_values(args, cameras, deadline_ms))
    feed = None
    rss: list[tuple[float, float]] = []
    try:
        started = time.monotonic()
        while node.poll() is None and "active" not in (out / f"{name}_node.log").read_text(errors="replace"):
            if time.monotonic() - started > 600:
                raise SystemExit(f"{name}: the node did not become active in 600 s ({out / f'{name}_node.log'})")
            time.sleep(0.5)
        feed = sensors(args, out, name, cameras, rate_hz)
        started = time.monotonic()
        next_rss = started
        while node.poll() is None:
            now = time.monotonic()
            if now >= next_rss:
                rss.append((round(now - started, 1), round(rss_mb(node.pid), 1)))
                next_rss += 1.0
            plans, _ = observer.snapshot()
            if until(plans, now - started):
                break
            time.sleep(0.2)
        if node.poll() is not None:
            raise SystemExit(f"{name}: the node exited ({out / f'{name}_node.log'})")
        elapsed = time.monotonic() - started
    finally:
        if feed is not None:
            stop(feed)
        stop(node)
    plans, received = observer.snapshot()
    sent_lines = [json.loads(line) for line in (out / f"{name}_sensors.log").read_text().splitlines()
                  if line.startswith("{")]  # fmt: skip
    return {"plans": plans, "received": received, "sent": sent_lines, "rss_mb": rss, "seconds": elapsed}


def summary(seen: dict[str, Any], deadline_ms: float) -> dict[str, Any]:
    plans = seen["plans"]
    totals = [p["total_ms"] for p in plans]
    steps = [s for p in plans for s in p["steps_per_block"]]
    rss = [v for _, v in seen["rss_mb"]]
    tail = [v for t, v in seen["rss_mb"] if t >= seen["seconds"] / 3]
    received = seen["received"]
    per_camera: dict[str, float] = {}
    if len(received) >= 2:
        (t0, first), (t1, last) = received[0], received[-1]
        per_camera = {k: round((last[k] - first.get(k, 0)) / (t1 - t0), 1) for k in last if "image" in k}
    sent = seen["sent"]
    sent_rate = None
    if len(sent) >= 2:
        sent_rate = round((sum(sent[-1]["sent"]) - sum(sent[0]["sent"])) / (sent[-1]["t"] - sent[0]["t"]), 1)
    return {
        "seconds": round(seen["seconds"], 1),
        "plans": len(plans),
        "plans_per_s": round(len(plans) / seen["seconds"], 2) if seen["seconds"] else None,
        "deadline_ms": deadline_ms,
        "deadline_met": round(sum(p["deadline_met"] for p in plans) / len(plans), 3) if plans else None,
        "valid": round(sum(p["valid"] for p in plans) / len(plans), 3) if plans else None,
        "total_ms_p50": round(percentile(totals, 0.5), 1) if totals else None,
        "total_ms_p95": round(percentile(totals, 0.95), 1) if totals else None,
        "total_ms_max": round(max(totals), 1) if totals else None,
        "end_to_end_ms_p50": round(percentile([p["end_to_end_ms"] for p in plans], 0.5), 1) if plans else None,
        "mean_steps_per_block": round(statistics.fmean(steps), 2) if steps else None,
        "mean_early_tokens": round(statistics.fmean(p["early_tokens"] for p in plans), 1) if plans else None,
        "images_sent_per_s": sent_rate,
        "images_received_per_s": per_camera,
        "rss_mb_first_last_max": [rss[0], rss[-1], max(rss)] if rss else None,
        "rss_mb_growth_after_first_third": round(tail[-1] - tail[0], 1) if len(tail) >= 2 else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="wam-diff2-bench flood", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("flood"))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--cameras", type=int, default=6, choices=range(1, len(CAMERAS) + 1))
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--rate-hz", type=float, default=30.0, help="per camera, in the flood")
    parser.add_argument("--idle-rate-hz", type=float, default=10.0, help="the front camera, in the idle run")
    parser.add_argument("--plan-rate-hz", type=float, default=2.0)
    parser.add_argument("--speed", type=float, default=8.0, help="ego speed in the odometry (m/s)")
    parser.add_argument("--seconds", type=float, default=180.0, help="length of the flood")
    parser.add_argument("--idle-plans", type=int, default=12)
    parser.add_argument("--deadline-factor", type=float, default=1.2, help="deadline = idle median x this")
    parser.add_argument("--deadline-ms", type=float, default=0.0, help="use this deadline, skip the idle run")
    parser.add_argument("--publish", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _environment()
    if args.publish:
        publish(args)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    observer = Observer()
    result: dict[str, Any] = {"settings": {k: v for k, v in vars(args).items() if k != "publish"}}
    result["settings"]["out"] = str(args.out)
    result["machine"] = {"cpus": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    deadline = args.deadline_ms
    if deadline <= 0:
        idle = phase(args, args.out, observer, "idle", 1, args.idle_rate_hz, 0.0,
                     lambda plans, _: len(plans) >= args.idle_plans)  # fmt: skip
        result["idle"] = summary(idle, 0.0)
        deadline = round(statistics.median(p["total_ms"] for p in idle["plans"]) * args.deadline_factor, 1)
        print("idle:", json.dumps(result["idle"]), flush=True)
    flood = phase(args, args.out, observer, "flood", args.cameras, args.rate_hz, deadline,
                  lambda _, elapsed: elapsed >= args.seconds)  # fmt: skip
    result["flood"] = summary(flood, deadline)
    result["flood_rss_mb"] = flood["rss_mb"]
    print("flood:", json.dumps(result["flood"]), flush=True)
    (args.out / "flood.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
