#!/usr/bin/env bash
# The README's demo: set up .venv (scripts/bootstrap.sh), write the synthetic sample drive (a 25 s rosbag2 MCAP bag)
# and replay it through the node's planning pipeline with the package's demo model; leaves
#
#   demo_output/sample_drive/        the input bag (camera, odometry, IMU, navigation command)
#   demo_output/replay/out/          output bag: the node's Path, trajectory, markers and debug image + the inputs
#   demo_output/replay/metrics.json  ADE/FDE against the drive's true future, invalid-answer rate, latency
#   demo_output/replay/plots/        bev.png (predicted vs actual paths), error_over_horizon.png
#   demo_output/replay/predictions.jsonl, summary.txt
#
# Usage: scripts/demo.sh [extra wam-diff2-replay arguments, e.g. --rate-hz 1 or --device cuda]
# Environment: WAM_DIFF2_DEMO_DIR (default demo_output); everything scripts/bootstrap.sh reads (PYTHON, TORCH_SPEC).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT="${WAM_DIFF2_DEMO_DIR:-demo_output}"
BAG="$OUT/sample_drive"
REPLAY="$OUT/replay"
started=$(date +%s)

scripts/bootstrap.sh

if [ -f "$BAG/metadata.yaml" ]; then
  echo "[demo] using the sample drive in $BAG"
else
  echo "[demo] writing the sample drive to $BAG (about 30 s)"
  .venv/bin/wam-diff2-make-sample-bag "$BAG" --overwrite
fi

echo "[demo] replaying it with the demo model (plans at 2 Hz on the bag clock)"
rc=0
.venv/bin/wam-diff2-replay "$BAG" --out "$REPLAY" --model demo --rate-hz 2 --overwrite "$@" || rc=$?
# the count the replay itself recorded (not a figure written here)
plans=$(.venv/bin/python -c 'import json, sys; m = json.load(open(sys.argv[1]))
print(m["num_instants"], "plans,", m["num_valid"], "valid")' "$REPLAY/metrics.json" 2>/dev/null || echo "no metrics")

cat <<EOF

[demo] done in $(( $(date +%s) - started )) s (exit code $rc): $plans
  output bag:   $REPLAY/out          (ros2 bag play $REPLAY/out, or open $REPLAY/out/out.mcap in Foxglove)
  metrics:      $REPLAY/metrics.json
  plots:        $REPLAY/plots/bev.png, $REPLAY/plots/error_over_horizon.png
  predictions:  $REPLAY/predictions.jsonl
  summary:      $REPLAY/summary.txt
EOF
exit "$rc"
