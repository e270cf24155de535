#!/usr/bin/env bash
# Rotate vs Echo through one ropeserve process (CPU backend, --enable_echo)
# and one client process on 127.0.0.1. Writes bench/results/service_bench.json
# and bench/results/service_bench.md (with the Rotate/Echo ratios).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target ropeserve service_bench -j"$(nproc)"
mkdir -p bench/results
. scripts/lib/ropeserve.sh
trap 'stop_ropeserve >/dev/null || true' EXIT
start_ropeserve "$BUILD_DIR"/bin/ropeserve --backend=cpu --enable_echo --metrics_port=0
target=$ROPESERVE_TARGET
"$BUILD_DIR"/bin/service_bench --target="$target" --out=bench/results/service_bench.json \
  --seconds_per_case="${SECONDS_PER_CASE:-3}" > /dev/null
/usr/bin/python3 bench/summarize_service_bench.py bench/results/service_bench.json \
  > bench/results/service_bench.md
cat bench/results/service_bench.md
