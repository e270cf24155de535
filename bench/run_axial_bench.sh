#!/usr/bin/env bash
# Axial RoPE against a plain Rotate of the same bytes (bench/axial_bench.cc:
# a Flux latent and a Wan 2.1 latent, bfloat16, on one thread and on all);
# writes bench/results/axial_bench.json (Google Benchmark's JSON) and
# bench/results/axial_bench.md (the ratios, the target, the machine).
#
# Environment: BUILD_DIR (build), MIN_TIME (2 s per case), REPETITIONS (3),
# ROPE_CPU_SIMD to force a SIMD path.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target axial_bench -j"$(nproc)"
mkdir -p bench/results
"$BUILD_DIR"/bin/axial_bench \
  --benchmark_min_time="${MIN_TIME:-2}" \
  --benchmark_repetitions="${REPETITIONS:-3}" \
  --benchmark_report_aggregates_only=true \
  --benchmark_out=bench/results/axial_bench.json --benchmark_out_format=json
/usr/bin/python3 bench/summarize_axial_bench.py bench/results/axial_bench.json \
  > bench/results/axial_bench.md
cat bench/results/axial_bench.md
