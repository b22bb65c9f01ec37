#!/usr/bin/env bash
# Set up the project's virtual environments (idempotent; re-runs only what changed).
#
#   scripts/bootstrap.sh          .venv: torch (CPU 2.13.0 by default), the package with its ROS 2 (PyPI
#                                 wheels), replay, fleet, test, colcon, viewer, report-test and egodriver extras, and the
#                                 package's own ROS messages.
#   scripts/bootstrap.sh --tf457  .venv-tf457: the core engine against transformers 4.57.3 (the reference's pin).
#
# Environment: PYTHON (default python3), TORCH_SPEC (default "torch==2.13.0": the CPU build on these development
# machines, the CUDA build from PyPI elsewhere; on a CPU-only machine with internet access,
# TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" avoids the large CUDA download). On a fresh Debian machine run as root, missing system packages (python3-venv, python3-dev,
# cmake, g++) are installed with apt-get; otherwise the script says which to install.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
MODE="${1:-main}"

log() { printf '[bootstrap] %s\n' "$*" >&2; }

ensure_system_packages() {
  local missing=()
  command -v "$PYTHON" >/dev/null 2>&1 || missing+=(python3)
  "$PYTHON" -c "import ensurepip, venv" >/dev/null 2>&1 || missing+=(python3-venv)
  "$PYTHON" -c "import sysconfig, os; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" \
    >/dev/null 2>&1 || missing+=(python3-dev)
  if [ "$MODE" = main ]; then
    command -v cmake >/dev/null 2>&1 || missing+=(cmake)
    command -v g++ >/dev/null 2>&1 || missing+=(g++)
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing system packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    log "missing system packages: ${missing[*]} (install them, e.g. sudo apt-get install ${missing[*]})"
    exit 1
  fi
}

stamp_of() {  # changes whenever what the venv is built from changes
  cat setup.py pyproject.toml CMakeLists.txt package.xml msg/*.msg interfaces/autoware/*/msg/*.msg wam_diff2_ros/core/engine/cpu_kernels.cpp 2>/dev/null | sha256sum | cut -c1-16
  printf '%s %s\n' "$TORCH_SPEC" "$MODE"
}

ensure_system_packages
if [ "$MODE" = --tf457 ]; then
  VENV=.venv-tf457
  EXTRAS=".[test,gpu-kernels]"
  EXTRA_SPECS=("transformers==4.57.3")
else
  VENV=.venv
  EXTRAS=".[ros,replay,fleet,test,colcon,viewer,report-test,gpu-kernels,egodriver]"
  EXTRA_SPECS=()
fi
STAMP="$VENV/.bootstrap-$(stamp_of | sha256sum | cut -c1-16)"
if [ -f "$STAMP" ]; then
  log "$VENV is up to date"
  exit 0
fi
[ -x "$VENV/bin/python" ] || { log "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip setuptools wheel
log "installing $TORCH_SPEC"
# shellcheck disable=SC2086  # TORCH_SPEC may carry pip options, e.g. "torch==2.13.0 --index-url <CPU wheels>"
"${PIP[@]}" install $TORCH_SPEC
log "installing the package ($EXTRAS ${EXTRA_SPECS[*]})"
"${PIP[@]}" install -e "$EXTRAS" "${EXTRA_SPECS[@]}"
log "building the fast engine's CPU kernels (core/engine/cpu_kernels.cpp; once per environment, kept in $VENV)"
# This CPU's variant, and the AVX2 one on an AVX-512 CPU too (the tests check both; WAM_DIFF2_CPU_KERNEL_ISA=AVX2).
# A build is named by the source, the flags, the torch build and the Python ABI (cpu_kernels.build_key), so a
# finished build of the same name in the other environment is the same file: it is copied instead of compiled.
# The variants left to compile are compiled at once, one process each.
OTHER_VENV=.venv-tf457
[ "$VENV" = .venv-tf457 ] && OTHER_VENV=.venv
mapfile -t KERNEL_ISAS < <("$VENV/bin/python" -c 'from wam_diff2_ros.core.engine.cpu_kernels import ISA_RANK, kernel_isa
for isa in dict.fromkeys([kernel_isa(), *(["AVX2"] if ISA_RANK.get(kernel_isa(), 0) > ISA_RANK["AVX2"] else [])]):
    print(isa)')
build_kernel() {  # build_kernel ISA: copy the other environment's finished build of the same name, else compile
  "$VENV/bin/python" - "$1" "$OTHER_VENV" <<'PY'
import os, shutil, sys
from wam_diff2_ros.core.engine import cpu_kernels as k
isa, other = sys.argv[1], sys.argv[2]
mine = k.build_directory(isa) if k.kernel_flags(isa) is not None else None  # None: no variant for this CPU
if mine is not None and not os.path.exists(os.path.join(mine, k.READY)):
    theirs = os.path.join(other, "var", "cache", "wam_diff2_ros", k.module_name(isa))
    if os.path.exists(os.path.join(theirs, k.READY)):
        shutil.copytree(theirs, mine, dirs_exist_ok=True)
        print("[bootstrap] CPU kernels", isa, "copied from", theirs)
ready = k.load_kernel(isa) is not None
print("[bootstrap] CPU kernels", isa, k.kernel_loads().get(isa, "?"), mine if ready else
      "(the fast engine runs the stock layers)")
PY
}
KERNEL_JOBS=()
for isa in "${KERNEL_ISAS[@]}"; do build_kernel "$isa" & KERNEL_JOBS+=($!); done
for job in "${KERNEL_JOBS[@]}"; do wait "$job"; done  # one failing (not a failed build: that is logged) stops here
if [ "$MODE" = main ]; then
  log "building the package's ROS 2 messages"
  "$VENV/bin/wam-diff2-build-interfaces"
fi
rm -f "$VENV"/.bootstrap-*
touch "$STAMP"
log "$VENV ready"
