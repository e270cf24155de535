#!/usr/bin/env bash
# Small-call overhead, before/after in one session: two ropeserve processes
# side by side, one with --inline_rotate_max_bytes=0 (every Rotate handed to
# a work thread: the old path) and one with the default (small Rotates
# answered on the gRPC thread, like Echo); service_bench's 16 KiB cases
# (Echo and Rotate, 1 and 4 in flight) against each in turn, ROUNDS times.
# Writes bench/results/service_bench_inline.json (every run) and
# bench/results/service_bench_inline.md (medians of the per-round
# Rotate/Echo ratios).
#
# Environment: BUILD_DIR (build), ROUNDS (12), SECONDS_PER_CASE (1),
# SKIP_BUILD=1 to use the binaries as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ROUNDS=${ROUNDS:-12}
if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target ropeserve service_bench -j"$(nproc)"
fi
work=$(mktemp -d)
. scripts/lib/ropeserve.sh
queued_pid=""
cleanup() {
  [ -n "$queued_pid" ] && kill -TERM "$queued_pid" 2>/dev/null && wait "$queued_pid" 2>/dev/null
  stop_ropeserve >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
start_ropeserve "$BUILD_DIR"/bin/ropeserve --backend=cpu --enable_echo --inline_rotate_max_bytes=0
queued_pid=$ROPESERVE_PID
queued_target=$ROPESERVE_TARGET
ROPESERVE_PID=""
start_ropeserve "$BUILD_DIR"/bin/ropeserve --backend=cpu --enable_echo
inline_target=$ROPESERVE_TARGET
for round in $(seq 1 "$ROUNDS"); do
  for server in queued inline; do
    target=$queued_target
    [ "$server" = inline ] && target=$inline_target
    timeout 300 "$BUILD_DIR"/bin/service_bench --target="$target" --sizes=16KiB \
      --seconds_per_case="${SECONDS_PER_CASE:-1}" --out="$work/$server.$round.json" >/dev/null
  done
done
mkdir -p bench/results
/usr/bin/python3 bench/summarize_inline_rotate.py "$work" "$ROUNDS" \
  bench/results/service_bench_inline.json > bench/results/service_bench_inline.md
cat bench/results/service_bench_inline.md
