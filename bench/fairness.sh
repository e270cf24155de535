#!/usr/bin/env bash
# Fairness between clients: a client flooding at 10x its --max_calls_per_client
# share beside a well-behaved client at a steady rate (bench/fairness_run.py).
# Writes bench/results/fairness.{json,md}; exit 0 when the well-behaved
# client's p99 stays within 2x of its p99 alone with 0 errors.
# Environment: BUILD_DIR (build), SKIP_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target ropeserve ropeload -j"$(nproc)"
fi
PYTHONPATH=tests/support/python${PYTHONPATH:+:$PYTHONPATH} exec python3 bench/fairness_run.py \
  --ropeserve="$BUILD_DIR/bin/ropeserve" --ropeload="$BUILD_DIR/bin/ropeload" \
  --prefix=bench/results/fairness
