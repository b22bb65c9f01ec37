"""Publish a rosbag2 bag over DDS on its own timeline, optionally with ``/clock``.

What ``ros2 bag play [--clock] [--rate R] [--loop] [--remap ...]`` does, for machines that have ROS 2 only from
the PyPI wheels (``ros2 bag`` is not among them). Messages go out in receive-time order, each at
``start + (bag time - first bag time) / rate`` on the wall clock; with ``--clock`` the ``/clock`` topic is
advanced to each message's bag time just before the message is published (and every ``1 / --clock-hz`` s in
between), so a node with ``use_sim_time:=true`` sees the bag's time. Publishers are reliable with
a keep-last history of ``--qos-depth`` (default 100, so a subscriber that stalls for a moment still gets every
message; a best-effort subscriber such as the node's image inputs matches too), latched
(transient local) for ``/tf_static`` and topics recorded that way. At the end the player waits (up to
``--wait-for-all-acked`` ms) until reliable subscribers have acknowledged everything, so the last messages are
not lost when the process exits.

Exit codes: 0 done, 2 bad command line or the bag cannot be opened, 3 the bag is damaged (everything readable
before the damage was published), 130 interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from wam_diff2_ros.bag import BagReader, BagReadError, TopicInfo, message_class, ns_to_stamp
from wam_diff2_ros.ros.dds import ensure_fastdds_profile


def parse_remaps(pairs: Sequence[str]) -> dict[str, str]:
    """``FROM:=TO`` pairs -> {FROM: TO}; raises ValueError naming a malformed pair."""
    remaps: dict[str, str] = {}
    for pair in pairs:
        source, sep, target = pair.partition(":=")
        if not sep or not source.startswith("/") or not target.startswith("/"):
            raise ValueError(f"remap {pair!r} is not /FROM:=/TO")
        remaps[source] = target
    return remaps


def is_latched(info: TopicInfo) -> bool:
    """Whether a topic is played with transient-local durability (``/tf_static``, or recorded that way)."""
    if info.name == "/tf_static":
        return True
    return any("TRANSIENT_LOCAL" in str(getattr(q, "durability", "")) for q in info.qos)


class Pacer:
    """Maps bag time to wall time at ``rate`` and sleeps until a message is due (interruptible)."""

    def __init__(self, rate: float, stop: threading.Event, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.stop = stop
        self.clock = clock
        self.origin: tuple[int, float] | None = None  # (bag ns, wall s) of the first message

    def due(self, stamp_ns: int) -> float:
        """Wall time (``clock`` seconds) at which a message received at ``stamp_ns`` is due."""
        if self.origin is None:
            self.origin = (stamp_ns, self.clock())
        first_ns, wall = self.origin
        return wall + (stamp_ns - first_ns) / 1e9 / self.rate

    def bag_time(self, wall_s: float) -> int:
        """The bag time (ns) that wall time ``wall_s`` stands for."""
        first_ns, wall = self.origin or (0, wall_s)
        return first_ns + int((wall_s - wall) * self.rate * 1e9)

    def wait(self, stamp_ns: int, tick: Callable[[int], None] | None = None, tick_s: float = 0.0) -> bool:
        """Sleep until ``stamp_ns`` is due, calling ``tick(bag ns)`` about every ``tick_s`` s meanwhile;
        False when stopped first."""
        target = self.due(stamp_ns)
        while not self.stop.is_set():
            now = self.clock()
            if now >= target:
                return True
            step = target - now if tick is None or tick_s <= 0 else min(tick_s, target - now)
            if self.stop.wait(step):
                break
            if tick is not None and self.clock() < target:
                tick(min(self.bag_time(self.clock()), stamp_ns))
        return False


def play(reader: BagReader, topics: dict[str, TopicInfo], remaps: dict[str, str], args: argparse.Namespace) -> int:
    ensure_fastdds_profile()
    import rclpy
    import rclpy.context
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())
    context = rclpy.context.Context()
    rclpy.init(context=context, args=[])
    node = rclpy.create_node("wam_diff2_play", context=context, start_parameter_services=False)
    published = 0
    try:
        publishers: dict[str, Any] = {}
        clock = None
        for name, info in topics.items():
            durability = DurabilityPolicy.TRANSIENT_LOCAL if is_latched(info) else DurabilityPolicy.VOLATILE
            qos = QoSProfile(depth=args.qos_depth, reliability=ReliabilityPolicy.RELIABLE, durability=durability)
            publishers[name] = node.create_publisher(message_class(info.msgtype), remaps.get(name, name), qos)
        clock = node.create_publisher(Clock, "/clock", args.qos_depth) if args.clock else None
        _wait_for_subscribers(node, list(publishers.values()), args.wait_for_subscribers, stop)
        stop.wait(max(args.delay, 0.0))

        def tick(stamp_ns: int) -> None:
            if clock is not None:
                clock.publish(Clock(clock=ns_to_stamp(stamp_ns)))

        rounds = 0
        while not stop.is_set():
            rounds += 1
            pacer = Pacer(args.rate, stop)
            begin = None
            count = 0
            try:
                for message in reader.messages(list(topics)):
                    if begin is None:
                        begin = message.stamp_ns + int(args.start * 1e9)
                    if message.stamp_ns < begin:
                        continue
                    if args.duration is not None and message.stamp_ns > begin + int(args.duration * 1e9):
                        break
                    if not pacer.wait(message.stamp_ns, tick if clock is not None else None, 1.0 / args.clock_hz):
                        break
                    tick(message.stamp_ns)
                    publishers[message.topic].publish(message.msg)
                    count += 1
                    published += 1
                    if not args.quiet and count % 100 == 0:
                        elapsed = (message.stamp_ns - begin) / 1e9
                        print(f"[play] {count} messages, bag time +{elapsed:.1f} s", file=sys.stderr, flush=True)
            except BagReadError as exc:
                print(f"error: {exc} ({published} messages published)", file=sys.stderr)
                return 3
            if not args.quiet:
                print(f"[play] round {rounds}: {count} messages published", file=sys.stderr, flush=True)
            if not args.loop or count == 0:
                break
        return 130 if stop.is_set() else 0
    finally:
        _flush(list(publishers.values()) + ([clock] if clock is not None else []), args.wait_for_all_acked / 1000.0)
        node.destroy_node()
        rclpy.shutdown(context=context)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _flush(publishers: list[Any], timeout_s: float) -> None:
    """Give reliable subscribers up to `timeout_s` to acknowledge what was published before the writers go.

    Without it the last messages of a bag can be lost: the process exits while they are still in flight (a lost
    last sample is only repaired after the writer's next heartbeat, 3 s apart by default in Fast DDS).
    """
    from rclpy.duration import Duration

    deadline = time.monotonic() + timeout_s
    for publisher in publishers:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            publisher.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9)))
        except Exception:  # best effort on the way out (e.g. an RMW without the call)
            return


def _wait_for_subscribers(node: Any, publishers: list[Any], timeout_s: float, stop: threading.Event) -> None:
    deadline = time.monotonic() + timeout_s
    while timeout_s > 0 and not stop.is_set() and time.monotonic() < deadline:
        if all(p.get_subscription_count() > 0 for p in publishers):
            return
        stop.wait(0.05)
