#!/usr/bin/env bash
# Exact vs fast engine on a GPU: the full WAM-Diff2 2B architecture (random weights), bfloat16, one 1920x1080
# image (1980 visual tokens), default decoding; prints the comparison table and writes bench_gpu*.json.
#
#   scripts/bench_gpu.sh              on a CUDA machine (installs a CUDA torch into .venv if torch has no CUDA)
#   BENCH_GPU_TINY=1 scripts/bench_gpu.sh   the same commands on the tiny model on CPU (checks the script)
#
# Environment: PYTHON (default .venv/bin/python), OUT (default .), CUDA_TORCH_SPEC (default
# "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"), ITERATIONS (default 10).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${OUT:-.}
ITERATIONS=${ITERATIONS:-10}

if [ "${BENCH_GPU_TINY:-0}" = 1 ]; then
  common=(--model-id tiny --device cpu --dtype float32 --width 64 --height 64 --max-new-tokens 20 --block-size 8)
  common+=(--warmup 0 --iterations 1)
else
  if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    if ! command -v nvidia-smi >/dev/null; then
      echo "bench_gpu.sh: no CUDA device (nvidia-smi not found); BENCH_GPU_TINY=1 runs the CPU check" >&2
      exit 2
    fi
    # shellcheck disable=SC2086
    "$PYTHON" -m pip install --quiet ${CUDA_TORCH_SPEC:-torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128}
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  common=(--random-2b --device cuda --dtype bfloat16 --width 1920 --height 1080 --warmup 3)
  common+=(--iterations "$ITERATIONS")
fi

echo "== exact vs fast (CUDA graphs where available) =="
"$PYTHON" -m wam_diff2_ros.cli.bench "${common[@]}" --engine exact --engine fast --json "$OUT/bench_gpu.json"
echo "== fast without CUDA graphs =="
"$PYTHON" -m wam_diff2_ros.cli.bench "${common[@]}" --engine fast --no-cuda-graphs --no-counters \
  --json "$OUT/bench_gpu_nographs.json"
