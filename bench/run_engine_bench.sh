#!/usr/bin/env bash
# Builds and runs the engine benchmark, then torch doing the same rotations
# in-process (bench/torch_rope_bench.py) in the same session; writes
# bench/results/engine_bench.json (Google Benchmark's JSON),
# bench/results/torch_rope_bench.json and bench/results/engine_bench.md (the
# ratios against memcpy / sgemm / torch measured in the same run, and the
# machine). Without python3-torch the torch columns stay empty.
#
# Environment: BUILD_DIR (build), MIN_TIME (1 s per case), REPETITIONS (3),
# ROPE_CPU_SIMD to force a SIMD path.
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
torch_args=()
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 bench/torch_rope_bench.py --out=bench/results/torch_rope_bench.json \
    --min_seconds="${MIN_TIME:-1}"
  torch_args=(--torch=bench/results/torch_rope_bench.json)
else
  echo "run_engine_bench.sh: no python3-torch: skipping the torch comparison" >&2
fi
/usr/bin/python3 bench/summarize_engine_bench.py bench/results/engine_bench.json \
  "${torch_args[@]}" > bench/results/engine_bench.md
cat bench/results/engine_bench.md
