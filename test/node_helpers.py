"""Shared helpers of the node tests (no tests here): a node runner that uses the scripted engine
(:mod:`scripted_engine`), a sensor feeder for DDS tests and message collectors.

Run as a script it is ``wam_diff2_node`` with :class:`ScriptedEngine` instead of the real model::

    python test/node_helpers.py --ros-args --params-file config/wam_diff2.yaml -p model.path:=/tmp
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from core_helpers import patient
from process_helpers import stop_process, subprocess_env
from scripted_engine import ScriptedEngine

REPO_ROOT = Path(__file__).resolve().parents[1]
SUPPORT_SCRIPT = Path(__file__).resolve()


def trained_checkpoint() -> Path | None:
    """A checkpoint that answers in the trained waypoint format: ``$WAM_DIFF2_TRAINED_CHECKPOINT`` or the
    package's demo model (``wam_diff2_ros.demo.expand``) when it is available; None otherwise."""
    import os

    explicit = os.environ.get("WAM_DIFF2_TRAINED_CHECKPOINT")
    if explicit:
        return Path(explicit)
    try:
        from wam_diff2_ros.demo.expand import demo_checkpoint
    except ImportError:
        return None
    try:
        return Path(demo_checkpoint())
    except Exception:  # demo files not shipped yet, or corrupt
        return None


# --- DDS helpers ----------------------------------------------------------------------------------------


def rgb_image_msg(rgb: np.ndarray, stamp: Any, frame_id: str = "front_optical", encoding: str = "rgb8") -> Any:
    """A raw Image message of ``rgb`` in ``encoding`` (rgb8, bgr8, mono8, yuv422 ...) stamped ``stamp``."""
    from sensor_msgs.msg import Image

    height, width = rgb.shape[:2]
    if encoding == "rgb8":
        data, step = rgb.tobytes(), width * 3
    elif encoding == "bgr8":
        data, step = rgb[:, :, ::-1].tobytes(), width * 3
    elif encoding == "mono8":
        data, step = rgb[:, :, 1].tobytes(), width
    elif encoding == "yuv422":  # UYVY with neutral chroma (grey from the green channel)
        packed = np.full((height, width * 2), 128, dtype=np.uint8)
        packed[:, 1::2] = rgb[:, :, 1]
        data, step = packed.tobytes(), width * 2
    else:  # deliberately unknown encodings
        data, step = rgb.tobytes(), width * 3
    msg = Image()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.height, msg.width, msg.encoding, msg.step = height, width, encoding, step
    msg.data = data
    return msg


def jpeg_msg(rgb: np.ndarray, stamp: Any, frame_id: str = "left_optical", corrupt: bool = False) -> Any:
    """A CompressedImage (JPEG) of ``rgb``; ``corrupt`` keeps the JPEG header but garbles the rest."""
    import io

    from PIL import Image as PILImage
    from sensor_msgs.msg import CompressedImage

    buffer = io.BytesIO()
    PILImage.fromarray(rgb).save(buffer, "JPEG", quality=85)
    data = buffer.getvalue()
    if corrupt:
        data = data[:20] + bytes(range(256)) * 8
    msg = CompressedImage()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.format = "jpeg"
    msg.data = data
    return msg


@dataclass
class FeedSettings:
    """What :class:`SensorFeeder` publishes; tests change fields while it runs."""

    image_rate_hz: float = 10.0
    odometry_rate_hz: float = 50.0
    command_rate_hz: float = 2.0
    width: int = 320
    height: int = 180
    encoding: str = "rgb8"
    command: str = "left"
    vx: float = 5.0
    odometry_offset_s: float = 0.0  # odometry stamps = now + offset (negative: stale)
    odometry_nan: bool = False
    corrupt_compressed: bool = False
    zero_size: bool = False
    images: bool = True
    odometry: bool = True
    commands: bool = True
    compressed_camera: bool = True  # also publish ~/input/image_1 as JPEG
    pose: tuple[float, float, float] = (0.0, 0.0, 0.0)  # ego x, y (m), yaw (rad) in the odometry frame
    odometry_frame: str = "odom"
    frame: np.ndarray | None = None  # the image to publish (HxWx3 RGB) instead of the noise pattern


class SensorFeeder:
    """Publishes front raw images, a second camera as JPEG, odometry and commands at realistic rates from a
    background thread, all stamped with the publishing node's clock (or ``clock``)."""

    def __init__(
        self, node: Any, node_ns: str, settings: FeedSettings | None = None, clock: Callable[[], Any] | None = None
    ) -> None:
        from nav_msgs.msg import Odometry
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import CompressedImage, Image
        from std_msgs.msg import String

        self.node = node
        self.settings = settings or FeedSettings()
        self.now = clock or node.get_clock().now  # stamps: the node clock, or e.g. a simulated clock
        self.image_pub = node.create_publisher(Image, f"{node_ns}/input/image_0", qos_profile_sensor_data)
        self.jpeg_pub = node.create_publisher(CompressedImage, f"{node_ns}/input/image_1", qos_profile_sensor_data)
        self.odometry_pub = node.create_publisher(Odometry, f"{node_ns}/input/odometry", 10)
        self.command_pub = node.create_publisher(String, f"{node_ns}/input/command", 10)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent_image_stamps: list[int] = []
        self.sent_odometry_stamps: list[int] = []
        self._lock = threading.Lock()
        rng = np.random.default_rng(3)
        self._pattern = rng.integers(0, 256, size=(1080, 1920, 3), dtype=np.uint8)

    def _image(self) -> np.ndarray:
        s = self.settings
        if s.frame is not None:
            return np.ascontiguousarray(s.frame)
        return np.ascontiguousarray(self._pattern[: s.height, : s.width])

    def start(self) -> SensorFeeder:
        """Start publishing."""
        self._thread = threading.Thread(target=self._run, name="sensor-feeder", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop publishing."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _run(self) -> None:
        from nav_msgs.msg import Odometry
        from std_msgs.msg import String

        period = 0.005
        next_image = next_odometry = next_command = time.monotonic()
        while not self._stop.is_set():
            s = self.settings
            now_mono = time.monotonic()
            clock_now = self.now()
            if now_mono >= next_odometry:
                next_odometry += 1.0 / s.odometry_rate_hz
                if s.odometry:
                    msg = Odometry()
                    msg.header.stamp = (clock_now + _duration(s.odometry_offset_s)).to_msg()
                    msg.header.frame_id, msg.child_frame_id = s.odometry_frame, "base_link"
                    msg.twist.twist.linear.x = float("nan") if s.odometry_nan else s.vx
                    x, y, yaw = s.pose
                    msg.pose.pose.position.x, msg.pose.pose.position.y = float(x), float(y)
                    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
                    self.odometry_pub.publish(msg)
                    with self._lock:
                        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
                        self.sent_odometry_stamps.append(stamp_ns)
            if now_mono >= next_command:
                next_command += 1.0 / s.command_rate_hz
                if s.commands:
                    self.command_pub.publish(String(data=s.command))
            if now_mono >= next_image:
                next_image += 1.0 / s.image_rate_hz
                if s.images:
                    stamp = clock_now.to_msg()
                    if s.zero_size:
                        msg = rgb_image_msg(np.zeros((0, 0, 3), np.uint8), stamp, encoding=s.encoding)
                    else:
                        msg = rgb_image_msg(self._image(), stamp, encoding=s.encoding)
                    self.image_pub.publish(msg)
                    if s.compressed_camera:
                        self.jpeg_pub.publish(jpeg_msg(self._image(), stamp, corrupt=s.corrupt_compressed))
                    with self._lock:
                        self.sent_image_stamps.append(clock_now.nanoseconds)
            self._stop.wait(period)


def _duration(seconds: float) -> Any:
    from rclpy.duration import Duration

    return Duration(nanoseconds=round(seconds * 1e9))


class Collector:
    """Keeps every message of a topic (thread-safe) with helpers to wait for a matching one."""

    def __init__(self, node: Any, msg_type: type, topic: str, qos: Any = 10) -> None:
        self.messages: list[Any] = []
        self._lock = threading.Lock()
        self._event = threading.Condition(self._lock)
        self.subscription = node.create_subscription(msg_type, topic, self._on_message, qos)

    def _on_message(self, msg: Any) -> None:
        with self._event:
            self.messages.append(msg)
            self._event.notify_all()

    def clear(self) -> None:
        """Forget what was received."""
        with self._lock:
            self.messages.clear()

    def snapshot(self) -> list[Any]:
        """A copy of what was received."""
        with self._lock:
            return list(self.messages)

    def wait_for(
        self, predicate: Callable[[Any], bool] = lambda m: True, timeout: float = 10.0, new_only: bool = False
    ) -> Any | None:
        """The first message matching ``predicate`` (``new_only``: received after this call started; else also
        earlier ones); None on timeout (scaled for a busy machine: conftest.patient)."""
        deadline = time.monotonic() + patient(timeout)
        with self._event:
            seen = len(self.messages) if new_only else 0
            while True:
                for msg in self.messages[seen:]:
                    if predicate(msg):
                        return msg
                seen = len(self.messages)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._event.wait(remaining)


def diagnostic_status(array: Any, suffix: str) -> Any | None:
    """The status named ``<node>: <suffix>`` in a DiagnosticArray."""
    for status in array.status:
        if status.name.endswith(f": {suffix}"):
            return status
    return None


def diagnostic_values(status: Any) -> dict[str, str]:
    """Key → value of a DiagnosticStatus."""
    return {kv.key: kv.value for kv in status.values}


# --- processes, harness, services ---------------------------------------------------------------------------


def write_params(path: Path, values: dict[str, Any]) -> Path:
    """A ``/**: ros__parameters:`` YAML file with ``values`` (dotted names)."""
    import yaml

    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}, sort_keys=True), encoding="utf-8")
    return path


def node_command(params_files: Sequence[Path], *extra: str, scripted: bool = True) -> list[str]:
    """Command line of the node (scripted engine, or the real console script) with parameter files."""
    if scripted:
        command = [sys.executable, str(SUPPORT_SCRIPT)]
    else:
        command = [str(Path(sys.executable).with_name("wam_diff2_node"))]
    command.append("--ros-args")
    for path in params_files:
        command += ["--params-file", str(path)]
    return [*command, *extra]


class NodeProcess:
    """A node child process; output in ``log_path``; stopped with SIGINT (then SIGKILL)."""

    def __init__(self, command: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        import subprocess

        self.log_path = log_path
        environment = subprocess_env()
        for name, value in (env or {}).items():
            if value is None:
                environment.pop(name, None)
            else:
                environment[name] = value
        with log_path.open("wb") as log:
            self.popen = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, env=environment)

    def output(self) -> str:
        """Everything the process printed so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        """True while the process runs."""
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> int:
        """SIGINT, then SIGKILL; the exit code."""
        return stop_process(self.popen, timeout)


class Harness:
    """An rclpy context with one node spun by a background executor (module-scoped use)."""

    def __init__(self, name: str) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.node import Node

        self.context = Context()
        rclpy.init(context=self.context)
        self.node = Node(name, context=self.context)
        self.executor = MultiThreadedExecutor(num_threads=2, context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name=f"{name}-executor", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        import contextlib

        from rclpy.executors import ExternalShutdownException

        from wam_diff2_ros.ros.process import spin_until_shutdown

        with contextlib.suppress(ExternalShutdownException):
            spin_until_shutdown(self.executor, self.context)

    def call(self, srv_type: type, name: str, request: Any, timeout: float = 10.0) -> Any | None:
        """Call a service and wait for the response (None on timeout, scaled: conftest.patient)."""
        client = self.node.create_client(srv_type, name)
        try:
            if not client.wait_for_service(timeout_sec=patient(timeout)):
                return None
            future = client.call_async(request)
            deadline = time.monotonic() + patient(timeout)
            while not future.done() and time.monotonic() < deadline:
                time.sleep(0.01)
            return future.result() if future.done() else None
        finally:
            self.node.destroy_client(client)

    def lifecycle_state(self, node_fqn: str, timeout: float = 10.0) -> str | None:
        """Label of the lifecycle state of ``node_fqn`` (None when the service does not answer)."""
        from lifecycle_msgs.srv import GetState

        response = self.call(GetState, f"{node_fqn}/get_state", GetState.Request(), timeout)
        return None if response is None else response.current_state.label

    def change_state(self, node_fqn: str, transition_id: int, timeout: float = 30.0) -> bool | None:
        """Trigger a lifecycle transition; its success (None when the service does not answer)."""
        from lifecycle_msgs.srv import ChangeState

        request = ChangeState.Request()
        request.transition.id = transition_id
        response = self.call(ChangeState, f"{node_fqn}/change_state", request, timeout)
        return None if response is None else bool(response.success)

    def get_parameters(self, node_fqn: str, names: Sequence[str], timeout: float = 10.0) -> list[Any] | None:
        """Parameter values of a remote node (rcl_interfaces ParameterValue objects)."""
        from rcl_interfaces.srv import GetParameters

        response = self.call(
            GetParameters, f"{node_fqn}/get_parameters", GetParameters.Request(names=list(names)), timeout
        )
        return None if response is None else list(response.values)

    def close(self) -> None:
        """Shut everything down."""
        self.executor.shutdown(timeout_sec=30.0)  # returns as soon as the spin ends
        self._thread.join(30.0)
        self.node.destroy_node()
        self.context.try_shutdown()


def run_scripted_node(argv: Sequence[str] | None = None) -> int:
    """``wam_diff2_node``'s main() with :class:`ScriptedEngine`."""
    sys.path.insert(0, str(REPO_ROOT))
    from wam_diff2_ros.ros.node import main

    return main(argv, engine_factory=ScriptedEngine)


if __name__ == "__main__":
    sys.exit(run_scripted_node())
