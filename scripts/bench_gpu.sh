#!/usr/bin/env bash
# The fast engine's GPU checks in one short run (GPU time is scarce); prints everything and writes JSON to $OUT.
#
#   scripts/bench_gpu.sh                    on a CUDA machine (installs a CUDA torch into .venv if torch has none)
#   BENCH_GPU_TINY=1 scripts/bench_gpu.sh   the same steps on the tiny model on CPU, in seconds (checks the script):
#                                           no step time limits (a loaded machine is slow, not wrong), and
#                                           no fused variant (its compilation takes minutes on a CPU)
#
# Steps (a failing step is reported and the next one still runs; the exit status is 1 if any failed):
#   1. wam-diff2-bench on the full WAM-Diff2 2B architecture (random weights), bfloat16, one 1920x1080 image
#      (1980 visual tokens), default decoding: exact vs fast (CUDA graphs) vs fused (the fast engine
#      with its fused step kernels) in one run
#   1b. wam-diff2-bench --end-to-end: Image message -> Path through the node's PlannerRuntime,
#      p50/p95/p99 and the stage split, 12 steps per block (forced, static schedule) next to the dynamic default,
#      3 blocks, PLANS plans (default 200); once with model.preprocess host, once device; then
#      wam-diff2-bench --preprocessing (device path on CUDA: pixel values against host and transformers, times)
#   2. wam-diff2-bench agreement: demo and tiny models, bfloat16, 48 varied prompts: exact, fast and fused
#      against the exact engine in float32 (identical sequences, plan distances, valid rates, the verdicts)
#   3. test/test_fast_decoding_cuda.py: fast == exact tokens in float32 on CUDA, with and without CUDA graphs
#   4. wam-diff2-bench profile-gpu-step: the captured step's replay time and kernels by kind, and one plan's wall
#      and GPU time per phase (preprocess is in 'plan', vision inside prefill), fast and fused
#   5. wam-diff2-bench probe-gpu-kernels: a step's matrix products by shape (as the model has them, merged and
#      whether merging keeps the bits, scores), its attention by kernel (masked SDPA, grouped_attention, flash
#      varlen with seqused_k) and the vision patch embedding (Conv3d against one linear product, same bits?)
#
# Environment: PYTHON (default .venv/bin/python, else python3), OUT (default .), ITERATIONS (default 5), PLANS
# (end-to-end plans per schedule; default 200, tiny mode 3),
# CUDA_TORCH_SPEC (default "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128").
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
OUT=${OUT:-.}
ITERATIONS=${ITERATIONS:-5}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
failed=()

step() {  # step NAME SECONDS COMMAND...: run (at most SECONDS; no limit in tiny mode), time and report; a failure
  local name=$1 limit=$2 started=$SECONDS  # does not stop the others
  shift 2
  echo "== $name"
  [ "${BENCH_GPU_TINY:-0}" = 1 ] && limit=0  # timeout 0: no limit
  if timeout "$limit" "$@"; then
    echo "-- $name: ok ($((SECONDS - started)) s)"
  else
    echo "-- $name: FAILED with status $? ($((SECONDS - started)) s)"
    failed+=("$name")
  fi
}

if [ "${BENCH_GPU_TINY:-0}" = 1 ]; then
  device=cpu agreement_dtype=float32 prompts=1 probe=(--tiny --device cpu)
  agreement=(--model tiny --size 64x64)  # the demo model's CPU run is test/test_agreement.py's (slow)
  candidates=(--candidate fast)  # no fused engine on CPU here: compiling it takes minutes
  bench=(--model-id tiny --device cpu --dtype float32 --width 64 --height 64 --max-new-tokens 20 --block-size 8)
  bench+=(--warmup 0 --iterations 1)
  variants=(--engine fast) compared="exact vs fast"
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
  device=cuda agreement_dtype=bfloat16 prompts=48 probe=(--device cuda)
  agreement=(--model demo --model tiny)
  candidates=(--candidate fast --candidate fused)
  variants=(--engine fast --engine fused) compared="exact vs fast vs fused"
  bench=(--random-2b --device cuda --dtype bfloat16 --width 1920 --height 1080 --warmup 3 --iterations "$ITERATIONS")
fi
"$PYTHON" -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__,
'transformers', transformers.__version__, 'cuda', torch.version.cuda)"

# the figures first: if time runs out, the later checks are what is lost
step "$compared" 240 \
  "$PYTHON" -m wam_diff2_ros.cli.bench "${bench[@]}" --engine exact "${variants[@]}" --json "$OUT/bench_gpu.json"
# end to end through the node's runtime (the figures of a vehicle's plan), then host vs device preprocessing
if [ "${BENCH_GPU_TINY:-0}" = 1 ]; then
  e2e=(--model-id tiny --device cpu --dtype float32 --width 64 --height 64 --plans "${PLANS:-3}" --warmup 0)
  e2e+=(--engine exact)
  preprocessing=(--width 640 --height 360 --iterations 2)
else
  e2e=(--random-2b --device cuda --dtype bfloat16 --width 1920 --height 1080 --plans "${PLANS:-200}" --warmup 3)
  preprocessing=(--width 1920 --height 1080 --iterations 20)
fi
for preprocess in host device; do
  step "end to end, preprocess $preprocess" 600 \
    "$PYTHON" -m wam_diff2_ros.cli.bench --end-to-end "${e2e[@]}" --blocks 3 --steps-per-block 12 \
    --steps-per-block 0 --preprocess "$preprocess" --json "$OUT/end_to_end_$preprocess.json"
done
step "host vs device preprocessing" 120 \
  "$PYTHON" -m wam_diff2_ros.cli.bench --preprocessing "${preprocessing[@]}" --json "$OUT/preprocessing.json"

step "agreement yardstick, $agreement_dtype vs exact float32" 300 \
  "$PYTHON" -m wam_diff2_ros.cli.bench agreement "${agreement[@]}" --device "$device" \
  --dtype "$agreement_dtype" --prompts "$prompts" "${candidates[@]}" --json "$OUT/agreement.json"
step "fast == exact on CUDA, float32 (skipped without CUDA)" 120 \
  "$PYTHON" -m pytest -q -p no:cacheprovider -x test/test_fast_decoding_cuda.py
step "step graph and plan phase profile" 120 \
  "$PYTHON" -m wam_diff2_ros.cli.bench profile-gpu-step "${bench[@]}" --max-new-tokens 32 "${variants[@]}" \
  --json "$OUT/profile.json"  # one block: the same step graph (capacity bucket), a plan trace 4x smaller
step "matrix products, attention and patch embedding by variant" 90 \
  "$PYTHON" -m wam_diff2_ros.cli.bench probe-gpu-kernels "${probe[@]}" --json "$OUT/kernels.json"

# exact / fast / fused side by side: ms per step, kernels per replay, weight bandwidth of the products,
# attention per layer, tokens identical, the yardstick's verdict (from the JSON files above; '-' where absent)
step "engine rows" 60 "$PYTHON" -m wam_diff2_ros.cli.bench rows "$OUT"

if [ ${#failed[@]} -gt 0 ]; then
  echo "bench_gpu.sh: failed steps: ${failed[*]}"
  exit 1
fi
