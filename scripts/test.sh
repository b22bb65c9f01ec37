#!/usr/bin/env bash
# The project's test command (README, CI): set up both environments, lint, run the whole suite on the newest
# transformers 5.x, then the core engine tests again on transformers 4.57.3 (the reference implementation's pin).
# Extra arguments go to the first pytest run (e.g. scripts/test.sh -k decoding).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/bootstrap.sh
scripts/bootstrap.sh --tf457

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

echo "== pytest (transformers $(.venv/bin/python -c 'import transformers; print(transformers.__version__)'))"
.venv/bin/python -m pytest -q --durations=25 "$@"

# The core tests are the files marked `pytestmark = pytest.mark.core` (ROS-free: test/test_layers.py checks that).
# Only those files are collected here, since .venv-tf457 has no ROS to import the others with.
mapfile -t CORE_TESTS < <(grep -l '^pytestmark = pytest.mark.core' test/test_*.py)
echo "== pytest core: ${#CORE_TESTS[@]} files (transformers $(.venv-tf457/bin/python -c 'import transformers; print(transformers.__version__)'))"
.venv-tf457/bin/python -m pytest -q -p no:cacheprovider --durations=15 -m core "${CORE_TESTS[@]}"
