#!/usr/bin/env bash
# Bounded shutdown, 20 runs of the long-attention drain scenario with the
# default --teardown_timeout (5 s): every exit within the bound after the
# drain, no accepted call lost. Writes bench/results/bounded_shutdown.{json,md}.
# CI runs 3 of these with a 1 s bound (rope_e2e_bounded_shutdown_test).
# Environment: BUILD_DIR (build), RUNS (20), BOUND_S (5), SKIP_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target ropeserve ropeload -j"$(nproc)"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHONPATH=tests/support/python${PYTHONPATH:+:$PYTHONPATH} python3 tests/e2e/shutdown_test.py \
  --ropeserve="$BUILD_DIR/bin/ropeserve" --ropeload="$BUILD_DIR/bin/ropeload" --workdir="$work" \
  --runs="${RUNS:-20}" --teardown_timeout_s="${BOUND_S:-5}" --report=bench/results/bounded_shutdown
