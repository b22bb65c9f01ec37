#!/usr/bin/env bash
# Build wam_diff2_ros with colcon against the PyPI ROS 2 wheels of a virtualenv (the pip route's colcon build).
#
#   scripts/colcon_build.sh [-w WORKSPACE] [colcon build options ...]
#
# WORKSPACE (default: the checkout itself) receives build/, install/ and log/, as a plain `colcon build` there
# would. Steps:
#   1. colcon: `colcon-common-extensions` (and ament_cmake_pytest for `colcon test`) are pip-installed into
#      the venv when it has no colcon (pip install -e '.[colcon]' does the same);
#   2. the wheels' exported CMake files hard-code the wheel build machine's Python/numpy include dirs:
#      `wam-diff2-build-interfaces --fix-cmake-only` rewrites them to this venv's (idempotent);
#   3. the package's files are mirrored into WORKSPACE/build/_source/wam_diff2_ros (only changed files are
#      copied): CMake refuses to export the venv's include dirs from a source tree that contains the venv,
#      and scripts/bootstrap.sh puts .venv inside the checkout;
#   4. colcon build with CMAKE_PREFIX_PATH=AMENT_PREFIX_PATH=<venv> and the venv's Python.
# Then, as on a ROS install (there is no `ros2 run` on the pip route: run the installed launcher):
#   source WORKSPACE/install/setup.bash
#   WORKSPACE/install/wam_diff2_ros/lib/wam_diff2_ros/wam_diff2_node --ros-args \
#       --params-file WORKSPACE/install/wam_diff2_ros/share/wam_diff2_ros/config/wam_diff2.yaml -p model.path:=demo
# Environment: VENV (default: $VIRTUAL_ENV, else <checkout>/.venv).
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WS="$SRC"
if [ "${1:-}" = "-w" ]; then
  [ $# -ge 2 ] || { echo "usage: $0 [-w WORKSPACE] [colcon build options ...]" >&2; exit 2; }
  mkdir -p "$2"
  WS="$(cd "$2" && pwd)"
  shift 2
fi
VENV="${VENV:-${VIRTUAL_ENV:-$SRC/.venv}}"
PY="$VENV/bin/python"
log() { printf '[colcon_build] %s\n' "$*" >&2; }

[ -x "$PY" ] || { log "no virtualenv at $VENV (run scripts/bootstrap.sh, or set VENV)"; exit 1; }
if [ ! -x "$VENV/bin/colcon" ]; then
  log "installing colcon into $VENV"
  "$PY" -m pip --disable-pip-version-check -q install "colcon-common-extensions>=0.3" ros-ament-cmake-pytest
fi
"$VENV/bin/wam-diff2-build-interfaces" --fix-cmake-only

STAGE="$WS/build/_source/wam_diff2_ros"
"$PY" - "$SRC" "$STAGE" <<'PY'
"""Mirror the checkout's files (git's tracked and untracked-unignored ones) into the staging dir."""
import filecmp, os, shutil, subprocess, sys
from pathlib import Path

src, stage = Path(sys.argv[1]), Path(sys.argv[2])
try:
    listed = subprocess.run(["git", "-C", str(src), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    files = {f for f in listed if f and (src / f).is_file()}
except (OSError, subprocess.CalledProcessError):  # not a git checkout: everything but venvs and outputs
    skip = {".git", "build", "install", "log", "__pycache__"}
    files = set()
    for root, dirs, names in os.walk(src):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith(".venv")]
        files.update(str(Path(root, n).relative_to(src)) for n in names if not n.endswith(".pyc"))
for name in sorted(files):
    target = stage / name
    if not target.is_file() or not filecmp.cmp(src / name, target, shallow=False):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / name, target)
for path in sorted(stage.rglob("*"), reverse=True):
    if path.is_file() and str(path.relative_to(stage)) not in files:
        path.unlink()
PY

export CMAKE_PREFIX_PATH="$VENV${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export AMENT_PREFIX_PATH="$VENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
export PATH="$VENV/bin:$PATH"
cd "$WS"
log "colcon build of $SRC (staged in $STAGE) in $WS"
"$VENV/bin/colcon" build --base-paths "$STAGE" --packages-select wam_diff2_ros "$@" \
  --cmake-args "-DPython3_EXECUTABLE=$PY" -DPython3_FIND_VIRTUALENV=FIRST
log "done: source $WS/install/setup.bash; node: $WS/install/wam_diff2_ros/lib/wam_diff2_ros/wam_diff2_node"
