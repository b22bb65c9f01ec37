"""Build the Autoware message packages the node speaks (pip route, installs without Autoware).

``interfaces/autoware/<package>/`` holds the subset of Autoware's message packages that the node's Autoware
outputs and its turn-signal input use: ``autoware_planning_msgs`` (Trajectory, TrajectoryPoint),
``autoware_vehicle_msgs`` (TurnIndicatorsCommand) and ``autoware_internal_planning_msgs``
(CandidateTrajectories, CandidateTrajectory, GeneratorInfo); same package, type and field names as upstream
(:data:`UPSTREAM_VERSIONS`), so the RIHS01 type hashes equal upstream's and a bag written here decodes with
Autoware's definitions. Each is its own CMake project (the package name is the project name), built and
installed into the prefix like this package's own interfaces; Python modules land in the prefix's
site-packages, libraries in ``<prefix>/lib``.

A package that already imports from elsewhere (an Autoware install, a sourced workspace) is left alone: the
real one wins. ``COLCON_IGNORE`` keeps colcon from taking these directories for packages of a workspace.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

#: In build order (internal planning depends on planning).
PACKAGES = ("autoware_planning_msgs", "autoware_vehicle_msgs", "autoware_internal_planning_msgs")
#: The upstream releases whose definitions these are: autowarefoundation/autoware_msgs 1.12.0
#: (commit 7025d8f7) and autowarefoundation/autoware_internal_msgs 1.12.1 (commit 094122d3).
UPSTREAM_VERSIONS = {
    "autoware_planning_msgs": "autoware_msgs 1.12.0",
    "autoware_vehicle_msgs": "autoware_msgs 1.12.0",
    "autoware_internal_planning_msgs": "autoware_internal_msgs 1.12.1",
}
SOURCE_DIR = Path("interfaces", "autoware")


def installed_elsewhere(package: str, prefix: Path) -> Path | None:
    """Where ``package`` imports from when that is not under ``prefix`` (a real Autoware install), else None."""
    code = f"import importlib.util as u; s = u.find_spec({package!r}); print(s.origin if s and s.origin else '')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd="/")
    origin = result.stdout.strip()
    if result.returncode != 0 or not origin:
        return None
    path = Path(origin).resolve()
    return None if prefix.resolve() in path.parents else path


def build_autoware_interfaces(
    source: Path,
    prefix: Path,
    build_dir: Path,
    jobs: int,
    run: Callable[[list[str], Path, dict[str, str], str], None],
    cmake: str,
    env: dict[str, str],
    stage: Callable[[Path, Path], None],
) -> list[str]:
    """Configure, build and install each package of :data:`PACKAGES` missing from the environment; return the
    names built. ``run``/``stage`` are the interface builder's step runner and source mirror."""
    built = []
    for package in PACKAGES:
        where = installed_elsewhere(package, prefix)
        if where is not None:
            print(f"      {package}: installed at {where.parent}, not built")
            continue
        package_source = source / SOURCE_DIR / package
        staged, binary = build_dir / "autoware" / package / "src", build_dir / "autoware" / package / "build"
        stage(package_source, staged)
        binary.mkdir(parents=True, exist_ok=True)
        log = build_dir / f"build_{package}.log"
        log.write_text(f"{package} build, source {package_source}\n", encoding="utf-8")
        configure = [
            cmake,
            "-S",
            str(staged),
            "-B",
            str(binary),
            f"-DCMAKE_INSTALL_PREFIX={prefix}",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DPython3_FIND_VIRTUALENV=FIRST",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DBUILD_TESTING=OFF",
        ]
        run(configure, log, env, f"{package} configure")
        run([cmake, "--build", str(binary), "--parallel", str(jobs)], log, env, f"{package} build")
        run([cmake, "--install", str(binary)], log, env, f"{package} install")
        built.append(package)
    importlib.invalidate_caches()
    return built
