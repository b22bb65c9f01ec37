#!/usr/bin/env bash
# Data-parallel wam-diff2-infer over NUM_GPUS CUDA devices (default 1), like the reference's infer_gpu.sh.
# Example: NUM_GPUS=8 scripts/infer_gpu.sh --model_id checkpoints/WAM-Diff2-B32-2B \
#            --input_file eval.json --output_file outputs/predictions.json
set -euo pipefail
NUM_GPUS="${NUM_GPUS:-1}"
if [ "${NUM_GPUS}" -le 1 ]; then
  exec python -m wam_diff2_ros.cli.infer --device "${DEVICE:-cuda}" "$@"
fi
exec torchrun --standalone --nnodes=1 --nproc-per-node="${NUM_GPUS}" \
  --module wam_diff2_ros.cli.infer --device cuda "$@"
