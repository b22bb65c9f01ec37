#!/usr/bin/env bash
# Retrain the shipped demo model from scratch, in its three stages, into wam_diff2_ros/demo/weights/
# (docs/demo_model.md):
#
#   1. base:      synthetic kinematic samples only (3000 steps);                          written to $WORK/base
#   2. drives:    continue the base on those samples plus instants of 20 simulated drives and their mirror images
#                 (what a replay of a sample bag asks), mostly at the sample bag's image grid; written to $WORK/drives
#   3. refine:    continue at a lower learning rate on instants of 40 drives;   written to demo/weights/ (or $OUT)
#
# A base already in $WORK/base is reused. Same seeds, torch build, thread count and kind of CPU -> the same weights; the manifest
# records each stage's command, wall time and the base's sha256. Stages 1 and 2 measure only the validation drives
# when they end (--final-eval validation: what they are continued from needs no more); stage 3 measures every set.
#
# Usage: scripts/train_demo.sh        Environment: WORK (default /tmp/wam_diff2_demo_train), OUT, THREADS (2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WORK="${WORK:-/tmp/wam_diff2_demo_train}"
OUT="${OUT:-wam_diff2_ros/demo/weights}"
THREADS="${THREADS:-2}"
TRAIN=(.venv/bin/wam-diff2-train-demo --threads "$THREADS")
export OMP_NUM_THREADS="$THREADS"

if [ -f "$WORK/base/manifest.json" ]; then
  echo "[train_demo] reusing the base model in $WORK/base"
else
  echo "[train_demo] stage 1: the base model (3000 steps, 41-57 min on 2 cores)"
  "${TRAIN[@]}" --out "$WORK/base" --train-samples 8000 --epochs 3 --noisy-copies 2 --lr 3e-3 --eval-samples 60 \
    --probe-every 300 --final-eval validation
fi

echo "[train_demo] stage 2: continuing on simulated drives (900 steps, 18-20 min on 2 cores)"
"${TRAIN[@]}" --out "$WORK/drives" --init-from "$WORK/base" --train-samples 480 --drive-frames 48 --sample-drives 20 \
  --drive-sizes camera --epochs 3 --lr 1.5e-3 --warmup-steps 30 --eval-samples 20 --probe-every 0 \
  --final-eval validation

echo "[train_demo] stage 3: refining on instants of 40 drives (380 steps, 10-12 min on 2 cores)"
"${TRAIN[@]}" --out "$OUT" --init-from "$WORK/drives" --train-samples 480 --drive-frames 32 --sample-drives 40 \
  --drive-sizes camera --epochs 1 --lr 5e-4 --warmup-steps 10 --eval-samples 20 --probe-every 0
