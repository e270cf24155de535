#!/usr/bin/env bash
# Builds and runs the engine benchmark; writes bench/results/engine_bench.json
# (Google Benchmark's JSON) and bench/results/engine_bench.md (the ratios
# against memcpy / sgemm measured in the same run, and the machine).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target engine_bench -j"$(nproc)"
mkdir -p bench/results
"$BUILD_DIR"/bin/engine_bench \
  --benchmark_min_time="${MIN_TIME:-1}" \
  --benchmark_repetitions="${REPETITIONS:-3}" \
  --benchmark_report_aggregates_only=true \
  --benchmark_out=bench/results/engine_bench.json --benchmark_out_format=json
/usr/bin/python3 bench/summarize_engine_bench.py bench/results/engine_bench.json \
  > bench/results/engine_bench.md
cat bench/results/engine_bench.md
