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
.venv/bin/python -m pytest -q "$@"

CORE_TESTS=(test/test_processor.py test/test_checkpoint.py test/test_decoding.py test/test_tiny.py
            test/test_engine.py test/test_infer.py test/test_prompts.py test/test_parsing.py)
[ -f test/test_demo_model.py ] && CORE_TESTS+=(test/test_demo_model.py)
echo "== pytest core (transformers $(.venv-tf457/bin/python -c 'import transformers; print(transformers.__version__)'))"
.venv-tf457/bin/python -m pytest -q -p no:cacheprovider "${CORE_TESTS[@]}"
