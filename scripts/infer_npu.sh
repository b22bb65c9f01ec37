#!/usr/bin/env bash
# Data-parallel wam-diff2-infer over NUM_DEVICES Ascend NPUs (default 1); needs torch_npu and CANN.
set -euo pipefail
NUM_DEVICES="${NUM_DEVICES:-1}"
if [ "${NUM_DEVICES}" -le 1 ]; then
  exec python -m wam_diff2_ros.cli.infer --device npu "$@"
fi
exec torchrun --standalone --nnodes=1 --nproc-per-node="${NUM_DEVICES}" \
  --module wam_diff2_ros.cli.infer --device npu "$@"
