#!/usr/bin/env bash
# Build wam_diff2_ros' own ROS 2 messages into a virtualenv that has ROS 2 from the PyPI wheels
# (the pip route; colcon users do not need this). Same as `wam-diff2-build-interfaces`.
#
#   scripts/build_interfaces.sh [--clean] [--prefix DIR] [--build-dir DIR] [--uninstall] [-j N]
#
# Python: $PYTHON, else the active virtualenv, else ./.venv of this checkout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -n "${VIRTUAL_ENV:-}" ]]; then
    python="$VIRTUAL_ENV/bin/python"
  elif [[ -x "$root/.venv/bin/python" ]]; then
    python="$root/.venv/bin/python"
  else
    echo "error: activate the virtualenv or set PYTHON=/path/to/venv/bin/python" >&2
    exit 2
  fi
fi
cd "$root"
exec "$python" -m wam_diff2_ros.cli.build_interfaces --source "$root" "$@"
