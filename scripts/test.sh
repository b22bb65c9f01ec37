#!/usr/bin/env bash
# The project's test command (README, CI): set up both environments, lint, run the whole suite on the newest
# transformers 5.x, then the core engine tests again on transformers 4.57.3 (the reference implementation's pin).
# Every stage runs even when an earlier one failed; each failure is reported and the exit status is 1 if any
# stage failed. Extra arguments go to the first pytest run (e.g. scripts/test.sh -k decoding).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

failed=()
stage() {  # stage NAME COMMAND...: run one stage, time it, remember a failure
  local name=$1 started=$SECONDS status
  shift
  echo "== $name"
  "$@"
  status=$?
  if [ "$status" -eq 0 ]; then
    echo "-- $name: ok ($((SECONDS - started)) s)"
  else
    echo "-- $name: FAILED with status $status ($((SECONDS - started)) s)"
    failed+=("$name")
  fi
  return "$status"
}

stage "bootstrap .venv" scripts/bootstrap.sh
stage "bootstrap .venv-tf457" scripts/bootstrap.sh --tf457

# what the CPU kernel tests and the timings depend on, for reading a CI log
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
echo "== machine: ${cpu:-unknown CPU}, $(nproc 2>/dev/null || echo '?') cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}," \
  "kernel variant $(.venv/bin/python -c 'from wam_diff2_ros.core.engine.cpu_kernels import kernel_isa; print(kernel_isa())' 2>/dev/null || echo '?')"

stage "ruff check" .venv/bin/ruff check .
stage "ruff format" .venv/bin/ruff format --check .

version() { "$1/bin/python" -c 'import transformers; print(transformers.__version__)' 2>/dev/null || echo "?"; }

stage "pytest (transformers $(version .venv))" .venv/bin/python -m pytest -q --durations=25 "$@"

# The core tests are the files marked `pytestmark = pytest.mark.core` (ROS-free: test/test_layers.py checks that).
# Only those files are collected here, since .venv-tf457 has no ROS to import the others with.
mapfile -t CORE_TESTS < <(grep -l '^pytestmark = pytest.mark.core' test/test_*.py)
stage "pytest core: ${#CORE_TESTS[@]} files (transformers $(version .venv-tf457))" \
  .venv-tf457/bin/python -m pytest -q -p no:cacheprovider --durations=15 -m core "${CORE_TESTS[@]}"

if [ ${#failed[@]} -gt 0 ]; then
  echo "scripts/test.sh: ${#failed[@]} stage(s) failed:"
  printf '  - %s\n' "${failed[@]}"
  exit 1
fi
echo "scripts/test.sh: every stage passed ($SECONDS s)"
