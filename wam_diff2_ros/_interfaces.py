"""Locate this package's generated ROS 2 interfaces when they live outside the package directory.

A colcon build installs the generated ``msg`` subpackage (and its typesupport extension modules)
into the same directory as our code, so there is nothing to do. The pip route
(``wam-diff2-build-interfaces``) installs them into ``<prefix>/lib/wam_diff2_ros_interfaces/
wam_diff2_ros/`` instead, so that neither an editable nor a regular install of this package is
shadowed or overwritten; :func:`extend_package_path` appends that directory to the package's
``__path__`` so that ``from wam_diff2_ros.msg import PlannedTrajectory`` works.

Only the file system is consulted (no ROS import) and nothing here raises: without the interfaces
``wam_diff2_ros.msg`` simply does not exist and callers fall back to standard messages.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import MutableSequence
from pathlib import Path

PACKAGE = "wam_diff2_ros"
# Relative to an install prefix; must match WAM_DIFF2_ROS_INTERFACES_PYTHON_DIR in CMakeLists.txt.
INTERFACES_PYTHON_DIR = Path("lib", "wam_diff2_ros_interfaces")
# Extra prefixes (os.pathsep-separated) searched before sys.prefix and $AMENT_PREFIX_PATH.
PREFIX_ENV = "WAM_DIFF2_ROS_INTERFACES_PREFIX"


def candidate_prefixes() -> list[Path]:
    """Install prefixes to search, in order: ``$WAM_DIFF2_ROS_INTERFACES_PREFIX``, ``sys.prefix``,
    then ``$AMENT_PREFIX_PATH``; duplicates removed."""
    raw = os.environ.get(PREFIX_ENV, "").split(os.pathsep)
    raw.append(sys.prefix)
    raw.extend(os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep))
    prefixes: list[Path] = []
    for entry in raw:
        if entry and Path(entry) not in prefixes:
            prefixes.append(Path(entry))
    return prefixes


def has_typesupport_module(package_dir: Path) -> bool:
    """True when the C typesupport extension module that generated messages import is present."""
    stem = f"{PACKAGE}_s__rosidl_typesupport_c"
    return any((package_dir / f"{stem}{suffix}").is_file() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def has_interfaces(package_dir: Path) -> bool:
    """True when ``package_dir`` holds a generated ``msg`` subpackage and its typesupport module."""
    try:
        return (package_dir / "msg" / "__init__.py").is_file() and has_typesupport_module(package_dir)
    except OSError:
        return False


def find_generated_package_dir() -> Path | None:
    """The first ``<prefix>/lib/wam_diff2_ros_interfaces/wam_diff2_ros`` with usable interfaces."""
    for prefix in candidate_prefixes():
        package_dir = prefix / INTERFACES_PYTHON_DIR / PACKAGE
        if has_interfaces(package_dir):
            return package_dir
    return None


def extend_package_path(package_path: MutableSequence[str]) -> Path | None:
    """Append the generated interfaces directory to ``package_path`` (the package's ``__path__``).

    Does nothing when a directory already on ``package_path`` has a ``msg`` subpackage (colcon
    install) or when no generated interfaces are found. Returns the directory in use, or None.
    """
    try:
        for entry in package_path:
            if (Path(entry) / "msg" / "__init__.py").is_file():
                return Path(entry)
        package_dir = find_generated_package_dir()
        if package_dir is not None and str(package_dir) not in package_path:
            package_path.append(str(package_dir))
        return package_dir
    except (OSError, TypeError, ValueError):
        return None
