"""Point Fast DDS at the package's profile (``config/fastdds_profile.xml``) unless the user chose one.

Why: with Fast DDS defaults large camera frames (1080p rgb8 = 6.2 MB) do not fit the default
shared-memory segment and are silently lost (design notes §6). The profile gives a 64 MB SHM
transport and 4 MB UDP buffers.

How: Fast DDS reads ``FASTDDS_DEFAULT_PROFILES_FILE`` (Fast DDS 3, Kilted and later) or
``FASTRTPS_DEFAULT_PROFILES_FILE`` (Fast DDS 2: Humble, Jazzy) with ``getenv`` when the first
participant of the process is created, which happens in ``rclpy.init()`` / the first node.
``os.environ[...] = ...`` calls ``putenv``, so setting it in ``main()`` before ``rclpy.init()`` is
enough; no re-exec is needed. Nothing is changed when either variable is already set, when
``RMW_IMPLEMENTATION`` is not Fast DDS, or when ``WAM_DIFF2_NO_FASTDDS_PROFILE=1``. Other processes
(camera drivers, rosbag play) need the same variable: the launch file sets it for everything it starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

PROFILE_NAME = "fastdds_profile.xml"
PACKAGE = "wam_diff2_ros"
PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")
OPT_OUT_VARIABLE = "WAM_DIFF2_NO_FASTDDS_PROFILE"


def _prefixes(environ: MutableMapping[str, str]) -> list[Path]:
    entries = [*environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep), sys.prefix]
    return [Path(e) for e in dict.fromkeys(entries) if e]


def find_profile(environ: MutableMapping[str, str] | None = None) -> Path | None:
    """The packaged profile: ``<prefix>/share/wam_diff2_ros/config/`` (AMENT_PREFIX_PATH, sys.prefix), else
    the source tree's ``config/``."""
    env = os.environ if environ is None else environ
    for prefix in _prefixes(env):
        candidate = prefix / "share" / PACKAGE / "config" / PROFILE_NAME
        if candidate.is_file():
            return candidate
    source = Path(__file__).resolve().parents[2] / "config" / PROFILE_NAME
    return source if source.is_file() else None


def fastdds_major_version(environ: MutableMapping[str, str] | None = None) -> int | None:
    """3 (``share/fastdds`` or ``lib/libfastdds.so*``), 2 (``fastrtps`` likewise) or None when unknown."""
    env = os.environ if environ is None else environ
    for prefix in _prefixes(env):
        for major, name in ((3, "fastdds"), (2, "fastrtps")):
            if (prefix / "share" / name).is_dir() or any((prefix / "lib").glob(f"lib{name}.so*")):
                return major
    distro = env.get("ROS_DISTRO", "")
    if distro in ("humble", "iron", "jazzy"):
        return 2
    if distro:
        return 3
    return None


def profile_variables(profile: Path, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The variable(s) that make Fast DDS load ``profile``: the installed version's one, both if unknown."""
    major = fastdds_major_version(environ)
    names = {3: PROFILE_VARIABLES[:1], 2: PROFILE_VARIABLES[1:]}.get(major, PROFILE_VARIABLES)  # type: ignore[arg-type]
    return {name: str(profile) for name in names}


def ensure_fastdds_profile(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set the profile variable in ``environ`` (default ``os.environ``) unless the user decided already.

    Returns what was set ({} when nothing was). Must run before ``rclpy.init()``.
    """
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT_VARIABLE, "") not in ("", "0"):
        return {}
    if any(env.get(name) for name in PROFILE_VARIABLES):
        return {}
    rmw = env.get("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    if rmw and "fastrtps" not in rmw:
        return {}
    profile = find_profile(env)
    if profile is None:
        return {}
    variables = profile_variables(profile, env)
    env.update(variables)
    return variables
