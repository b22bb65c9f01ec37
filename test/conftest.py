"""Shared pytest fixtures for tests that talk DDS (real rclpy, real Fast DDS).

Isolation is set up once, when pytest starts (before any test can call ``rclpy.init``), in
``os.environ`` of the pytest process, so every rclpy context and every child process of the run
inherits it:

* ``ROS_DOMAIN_ID``: unique per test session (1..200, derived from the pid; override with
  ``WAM_DIFF2_TEST_DOMAIN_ID``), so parallel runs on one machine do not see each other;
* ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (``ROS_LOCALHOST_ONLY=1`` on Humble), no static peers
  and no discovery server: no DDS traffic leaves the machine;
* the package's Fast DDS profile ``config/fastdds_profile.xml`` (large SHM segment, 4 MB UDP buffers)
  through ``FASTDDS_DEFAULT_PROFILES_FILE`` (Fast DDS 3) or ``FASTRTPS_DEFAULT_PROFILES_FILE``
  (Fast DDS 2), so 1080p images pass as they do on the vehicle;
* ``ROS_LOG_DIR`` / ``ROS_HOME`` in a temporary directory removed at the end of the session; at the end, too,
  the Fast DDS shared memory of the session's participants that died without closing is removed.

Fixtures (all skip with a reason when rclpy is not importable):

* ``ros_env``: the isolation variables (a dict) as applied to this process;
* ``ros_context``: a fresh, initialised ``rclpy.context.Context``, shut down afterwards;
* ``ros``: a :class:`RosHarness` = context + node + executor spinning in a background thread, with
  :meth:`RosHarness.wait_for_messages`, :meth:`RosHarness.wait_for` and friends;
* ``ros_process``: a factory that starts child processes with the test environment
  (:class:`RosProcess`), stopped (SIGINT, then SIGKILL) at teardown.

Helpers usable without fixtures: :func:`wait_for_messages`, :data:`FASTDDS_PROFILE`; the process helpers
(``subprocess_env``, ``stop_process``, ``unique_name``) live in ``process_helpers.py`` and ``wait_until`` in
``core_helpers.py`` (tests import those modules, never this one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from core_helpers import patient, wait_until
from process_helpers import (
    fastdds_segments,
    is_foreign_python,
    remove_stale_fastdds_segments,
    stop_process,
    subprocess_env,
    unique_name,
)

# Triton's kernels run under its CPU interpreter where there is no GPU; the switch is read when a kernel is
# decorated, so it must be set before any test module imports one (test_triton_kernels.py is not the first).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
FASTDDS_PROFILE = REPO_ROOT / "config" / "fastdds_profile.xml"
DEFAULT_TIMEOUT_S = 10.0


_ROS_ENV: dict[str, str] = {}
_TMP_DIR: Path | None = None
_SHM_AT_START: set[str] = set()


def session_domain_id() -> int:
    """The ROS domain id of this test session: ``$WAM_DIFF2_TEST_DOMAIN_ID`` or 1 + pid % 200."""
    override = os.environ.get("WAM_DIFF2_TEST_DOMAIN_ID")
    if override:
        value = int(override)
        if not 0 <= value <= 232:
            raise ValueError(f"WAM_DIFF2_TEST_DOMAIN_ID must be within 0..232, got {value}")
        return value
    return 1 + os.getpid() % 200


def profile_env(profile: Path = FASTDDS_PROFILE) -> dict[str, str]:
    """Environment variables that make Fast DDS load ``profile`` as the default participant profile
    (only the installed Fast DDS major version's variable; both when it cannot be told)."""
    from wam_diff2_ros.ros.dds import profile_variables

    return profile_variables(profile)


def _isolation_env(tmp_dir: Path) -> dict[str, str]:
    env = {
        "ROS_DOMAIN_ID": str(session_domain_id()),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "ROS_LOG_DIR": str(tmp_dir / "log"),
        "ROS_HOME": str(tmp_dir / "ros_home"),
        **profile_env(),
    }
    if os.environ.get("ROS_DISTRO") == "humble":  # Humble predates ROS_AUTOMATIC_DISCOVERY_RANGE
        env["ROS_LOCALHOST_ONLY"] = "1"
    return env


def pytest_configure(config: pytest.Config) -> None:
    """Apply the DDS isolation environment to this process before any test runs."""
    global _TMP_DIR
    _TMP_DIR = Path(tempfile.mkdtemp(prefix="wam_diff2_ros_test_"))
    _SHM_AT_START.update(fastdds_segments())
    for variable in ("ROS_STATIC_PEERS", "ROS_DISCOVERY_SERVER", "ROS_LOCALHOST_ONLY"):
        os.environ.pop(variable, None)
    _ROS_ENV.update(_isolation_env(_TMP_DIR))
    os.environ.update(_ROS_ENV)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's temporary ROS_HOME / ROS_LOG_DIR, and the shared memory of the participants it
    started that died without closing (children stopped with SIGKILL): 64 MB of RAM each otherwise."""
    if _TMP_DIR is not None:
        shutil.rmtree(_TMP_DIR, ignore_errors=True)
    remove_stale_fastdds_segments(keep=_SHM_AT_START)


def pytest_report_header(config: pytest.Config) -> str:
    """Show the DDS isolation in pytest's header."""
    keys = ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE")
    return "dds: " + ", ".join(f"{k}={_ROS_ENV[k]}" for k in keys if k in _ROS_ENV)


def _require_rclpy() -> Any:
    return pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")


def wait_for_messages(
    node: Any,
    msg_type: type,
    topic: str,
    count: int = 1,
    timeout: float = DEFAULT_TIMEOUT_S,
    qos: Any = 10,
    trigger: Callable[[], None] | None = None,
) -> list[Any]:
    """Subscribe ``node`` to ``topic`` and collect ``count`` messages (fewer on timeout).

    The node must be spun by someone else (e.g. the ``ros`` fixture's executor). ``trigger`` runs once
    the subscription exists (start a publisher there to avoid missing volatile messages). The
    subscription is destroyed before returning; callers assert on ``len(result)``.
    """
    received: list[Any] = []
    done = threading.Event()
    lock = threading.Lock()

    def _callback(msg: Any) -> None:
        with lock:
            if len(received) < count:
                received.append(msg)
            if len(received) >= count:
                done.set()

    subscription = node.create_subscription(msg_type, topic, _callback, qos)
    try:
        if trigger is not None:
            trigger()
        done.wait(patient(timeout))
    finally:
        node.destroy_subscription(subscription)
    with lock:
        return list(received)


@dataclass
class RosHarness:
    """An initialised rclpy context, a node in it and an executor spinning in a background thread."""

    context: Any
    node: Any
    executor: Any
    extra_nodes: list[Any] = field(default_factory=list)

    def create_node(self, name: str | None = None, **kwargs: Any) -> Any:
        """Create another node in this context, spun by the same executor, destroyed at teardown."""
        from rclpy.node import Node

        node = Node(name or unique_name("test_node"), context=self.context, **kwargs)
        self.executor.add_node(node)
        self.extra_nodes.append(node)
        return node

    def wait_for_messages(self, msg_type: type, topic: str, count: int = 1, **kwargs: Any) -> list[Any]:
        """:func:`wait_for_messages` on this harness' node."""
        return wait_for_messages(self.node, msg_type, topic, count, **kwargs)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = DEFAULT_TIMEOUT_S) -> bool:
        """:func:`wait_until` (the executor keeps spinning meanwhile)."""
        return wait_until(predicate, timeout)

    def wait_for_publishers(self, topic: str, count: int = 1, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
        """Wait until ``topic`` has at least ``count`` publishers (discovery done)."""
        return wait_until(lambda: self.node.count_publishers(topic) >= count, timeout)

    def wait_for_subscribers(self, topic: str, count: int = 1, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
        """Wait until ``topic`` has at least ``count`` subscriptions (discovery done)."""
        return wait_until(lambda: self.node.count_subscribers(topic) >= count, timeout)


@pytest.fixture(scope="session")
def ros_env() -> dict[str, str]:
    """The DDS isolation variables applied to this session (domain id, discovery range, profile, logs)."""
    return dict(_ROS_ENV)


@pytest.fixture
def ros_context() -> Iterator[Any]:
    """A fresh initialised rclpy Context (not the global one), shut down after the test."""
    rclpy = _require_rclpy()
    from rclpy.context import Context

    context = Context()
    rclpy.init(context=context)
    try:
        yield context
    finally:
        context.try_shutdown()


@pytest.fixture
def ros(ros_context: Any) -> Iterator[RosHarness]:
    """A :class:`RosHarness`: node + SingleThreadedExecutor spinning in a thread; clean shutdown."""
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.node import Node

    node = Node(unique_name("test_node"), context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)
    errors: list[BaseException] = []

    def _spin() -> None:
        try:
            executor.spin()
        except ExternalShutdownException:
            pass
        except BaseException as exc:  # surfaced at teardown, never swallowed
            errors.append(exc)

    thread = threading.Thread(target=_spin, name="ros-test-executor", daemon=True)
    thread.start()
    harness = RosHarness(context=ros_context, node=node, executor=executor)
    try:
        yield harness
    finally:
        # generous: returns as soon as the spin ends; a loaded 2-core machine can take seconds for a callback
        executor.shutdown(timeout_sec=30.0)
        thread.join(timeout=30.0)
        for extra in harness.extra_nodes:
            extra.destroy_node()
        node.destroy_node()
    assert not thread.is_alive(), "executor thread did not stop"
    if errors:
        raise errors[0]


@dataclass
class RosProcess:
    """A child process started by the ``ros_process`` fixture; output goes to ``log_path``."""

    popen: subprocess.Popen[bytes]
    log_path: Path

    def output(self) -> str:
        """Everything the process wrote to stdout and stderr so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait(self, timeout: float = DEFAULT_TIMEOUT_S) -> int:
        """Wait for exit and return the exit code (raises subprocess.TimeoutExpired after ``timeout``, scaled)."""
        return self.popen.wait(patient(timeout))

    def stop(self, timeout: float = 5.0) -> int:
        """SIGINT (what Ctrl-C / ros2 launch send), then SIGKILL after ``timeout``; return exit code."""
        return stop_process(self.popen, timeout)


@pytest.fixture
def ros_process(tmp_path: Path) -> Iterator[Callable[..., RosProcess]]:
    """Factory ``start(cmd, *, env=None, foreign_python=None, cwd=None) -> RosProcess``.

    ``cmd`` is a sequence (``[sys.executable, "-c", code]``, a console script, ...). The child gets
    :func:`subprocess_env` (isolation included) updated with ``env``; ``foreign_python`` defaults to
    "``cmd[0]`` is a Python interpreter outside this venv". All processes are stopped at teardown.
    """
    _require_rclpy()
    started: list[RosProcess] = []

    def start(
        cmd: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        foreign_python: bool | None = None,
        cwd: str | Path | None = None,
    ) -> RosProcess:
        if foreign_python is None:
            foreign_python = is_foreign_python(str(cmd[0]))
        log_path = tmp_path / f"process_{len(started)}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                [str(c) for c in cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=subprocess_env(foreign_python, **(env or {})),
                cwd=cwd,
            )
        process = RosProcess(popen=popen, log_path=log_path)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
