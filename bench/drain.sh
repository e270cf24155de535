#!/usr/bin/env bash
# Drain under load: ropeload closed loops against ropeserve on 127.0.0.1,
# SIGTERM to the server mid-run, then checks that no call the server had
# accepted was lost and that it exits 0 within its grace period; also three
# replicas behind one round_robin target with SIGTERM to one of them (no
# failed call at all). Scenarios and criteria: bench/drain_run.py.
# Writes bench/results/drain.{json,md}; exit status 0 when every scenario
# passes.
#
# Environment: BUILD_DIR (default build), DURATION_S per ropeload run
# (default 6; SIGTERM comes 3 s in), ONLY (comma-separated scenario names),
# OUT_PREFIX (bench/results/drain), SKIP_BUILD=1 to use the binaries as they
# are.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DURATION_S=${DURATION_S:-6}
OUT_PREFIX=${OUT_PREFIX:-bench/results/drain}
if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target ropeserve ropeload -j"$(nproc)"
fi
mkdir -p "$(dirname "$OUT_PREFIX")"
# RopeServe (tests/support/python/ropeserve_process.py) starts the servers.
PYTHONPATH=tests/support/python${PYTHONPATH:+:$PYTHONPATH} exec python3 bench/drain_run.py --ropeserve="$BUILD_DIR/bin/ropeserve" \
  --ropeload="$BUILD_DIR/bin/ropeload" --duration_s="$DURATION_S" --prefix="$OUT_PREFIX" \
  --only="${ONLY:-}"
