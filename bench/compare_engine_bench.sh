#!/usr/bin/env bash
# Before/after figures for the engine benchmark, measured interleaved in one
# session (the machine is shared and noisy): builds engine_bench from
# BEFORE_REV's sources with this tree's bench/engine_bench.cc (same cases,
# same baselines), and from this tree; runs before, after, before, ... ROUNDS
# times (plus the after build once per extra SIMD path in SIMD_PATHS, forced
# with ROPE_CPU_SIMD); writes bench/results/engine_bench_before_after.json
# (every run) and .md (medians of the per-run ratios, and after / before),
# or OUT.json and OUT.md when OUT is set.
#
# Environment: BEFORE_REV (default: the merge base of HEAD and main),
# ROUNDS (5), MIN_TIME (0.5 s per case), SIMD_PATHS (e.g. "sse4 sse2"), OUT,
# FILTER (a --benchmark_filter regex for both builds, e.g. 'BM_Attention|BM_Sgemm'),
# BUILD_DIR (build), BEFORE_BUILD_DIR (build-before).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BEFORE_BUILD_DIR=${BEFORE_BUILD_DIR:-build-before}
BEFORE_REV=${BEFORE_REV:-$(git merge-base HEAD main)}
ROUNDS=${ROUNDS:-5}
MIN_TIME=${MIN_TIME:-0.5}
SIMD_PATHS=${SIMD_PATHS:-}
FILTER=${FILTER:-.}
OUT=${OUT:-bench/results/engine_bench_before_after}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# The before build: an engine-only tree of BEFORE_REV with today's benchmark.
src="$BEFORE_BUILD_DIR/src"
rm -rf "$src"
mkdir -p "$src"
git archive "$BEFORE_REV" | tar -x -C "$src"
cp bench/engine_bench.cc "$src/bench/engine_bench.cc"
cmake -S "$src" -B "$BEFORE_BUILD_DIR/out" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
  -DROPE_BUILD_SERVICE=OFF -DROPE_BUILD_CLIENT=OFF -DROPE_ENABLE_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build "$BEFORE_BUILD_DIR/out" --target engine_bench -j"$(nproc)" >/dev/null
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target engine_bench -j"$(nproc)" >/dev/null

runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
run() {  # LABEL BINARY [FILTER]
  local out="$runs/$1.$round.json"
  "$2" --benchmark_min_time="$MIN_TIME" --benchmark_filter="${3:-.}" \
    --benchmark_out="$out" --benchmark_out_format=json >/dev/null
}
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  run before "$BEFORE_BUILD_DIR/out/bin/engine_bench" "$FILTER"
  run after "$BUILD_DIR/bin/engine_bench" "$FILTER"
  for path in $SIMD_PATHS; do
    ROPE_CPU_SIMD=$path run "after_$path" "$BUILD_DIR/bin/engine_bench" 'BM_Rotate|BM_Attention|BM_Sgemm'
  done
done
mkdir -p bench/results
/usr/bin/python3 bench/compare_engine_bench.py --before_rev="$BEFORE_REV" \
  --after_rev="$(git rev-parse --short HEAD)$(git diff --quiet || echo +changes)" \
  --json_out="$OUT.json" "$runs" > "$OUT.md"
cat "$OUT.md"
