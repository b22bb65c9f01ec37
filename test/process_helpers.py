"""Child processes of the tests: their environment, stopping them as Ctrl-C does, unique node names. The DDS
isolation (``conftest.py``) is in ``os.environ`` before any test runs, so a child inherits it from here."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
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
