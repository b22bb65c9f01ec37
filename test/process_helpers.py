"""Child processes of the tests: their environment, stopping them as Ctrl-C does, unique node names, the Fast DDS
shared memory they leave when killed. The DDS isolation (``conftest.py``) is in ``os.environ`` before any test
runs, so a child inherits it from here."""

from __future__ import annotations

import fcntl
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from core_helpers import patient

#: Environment variables a child process on a *different* Python must not inherit: the PyPI ROS
#: wheels' bootstrapper sets them for this venv's Python only.
BOOTSTRAP_VARIABLES = ("LD_LIBRARY_PATH", "_ROS_WHEELS_BOOTSTRAP_COMPLETE")
_NAME_COUNTER = itertools.count()


def unique_name(stem: str = "test") -> str:
    """A node name unique within this session, e.g. ``test_node_3``."""
    return f"{stem}_{next(_NAME_COUNTER)}"


def is_foreign_python(executable: str) -> bool:
    """True for a Python interpreter other than this venv's (bootstrap variables must not leak)."""
    name = Path(executable).name
    if not name.startswith("python"):
        return False
    return (
        os.path.abspath(executable) != os.path.abspath(sys.executable)
        and Path(os.path.abspath(executable)).parent != Path(os.path.abspath(sys.executable)).parent
    )


def subprocess_env(foreign_python: bool = False, **overrides: str) -> dict[str, str]:
    """Environment for a child process: this process' (with the isolation) plus ``overrides``.

    With ``foreign_python`` the PyPI ROS wheels' bootstrap variables are removed, because a
    different interpreter would otherwise load this venv's libraries (or skip its own bootstrap).
    """
    env = dict(os.environ)
    if foreign_python:
        for variable in BOOTSTRAP_VARIABLES:
            env.pop(variable, None)
    env.update(overrides)
    return env


def stop_process(popen: subprocess.Popen, timeout: float) -> int:
    """Stop a child as Ctrl-C / ``ros2 launch`` do: SIGINT, then SIGKILL after ``timeout`` (scaled); its exit code."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGINT)
        try:
            popen.wait(patient(timeout))
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(patient(timeout))
    return popen.returncode


#: Where Fast DDS keeps its shared-memory segments (the package's profile makes each participant's 64 MB).
SHM_DIR = Path("/dev/shm")


def fastdds_segments(directory: Path = SHM_DIR) -> set[str]:
    """Names of the Fast DDS data segments in ``directory`` (not the port segments, which Fast DDS reuses)."""
    return {
        path.name[: -len("_el")] for path in directory.glob("fastdds_*_el") if not path.name.startswith("fastdds_port")
    }


def _owner_alive(lock_file: Path) -> bool:
    """A live participant holds an exclusive flock on its segment's ``<name>_el`` file."""
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also releases a lock taken here
    return False


def remove_stale_fastdds_segments(
    keep: Iterable[str] = (), directory: Path = SHM_DIR, min_age_s: float = 1.0
) -> list[str]:
    """Remove the data segments of Fast DDS participants that died without closing (a SIGKILL leaves one of
    64 MB in RAM until reboot); segments named in ``keep``, held by a live process or younger than ``min_age_s``
    (a participant locks its segment right after creating it) stay. Returns the names removed."""
    removed = []
    now = time.time()
    for name in sorted(fastdds_segments(directory) - set(keep)):
        lock_file = directory / f"{name}_el"
        try:
            young = now - lock_file.stat().st_mtime < min_age_s
        except FileNotFoundError:
            continue
        if young or _owner_alive(lock_file):
            continue
        for path in (directory / name, lock_file):
            path.unlink(missing_ok=True)
        removed.append(name)
    return removed
