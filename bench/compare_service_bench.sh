#!/usr/bin/env bash
# service_bench before/after a change of the service, in one run: two
# ropeserve binaries (BEFORE_BIN: the old build's; the tree's build) side by
# side on the CPU backend with --enable_echo, service_bench's 16 KiB and
# 4 MiB cases against each in turn, ROUNDS times. Each server's Rotate is
# measured against its own Echo in the same round (same bytes, same
# transport), so the ratios hold on a loaded machine where absolute figures
# do not. Writes OUT.json (every run) and OUT.md (per-round ratios and
# their medians).
#
# Environment: BEFORE_BIN (required), BUILD_DIR (build), ROUNDS (4),
# SECONDS_PER_CASE (1), OUT (bench/results/service_bench_before_after),
# LABEL (what changed, for the page).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ROUNDS=${ROUNDS:-4}
OUT=${OUT:-bench/results/service_bench_before_after}
: "${BEFORE_BIN:?BEFORE_BIN must name the ropeserve built before the change}"
work=$(mktemp -d)
. scripts/lib/ropeserve.sh
before_pid=""
cleanup() {
  [ -n "$before_pid" ] && kill -TERM "$before_pid" 2>/dev/null && wait "$before_pid" 2>/dev/null
  stop_ropeserve >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
start_ropeserve "$BEFORE_BIN" --backend=cpu --enable_echo
before_pid=$ROPESERVE_PID
before_target=$ROPESERVE_TARGET
ROPESERVE_PID=""
start_ropeserve "$BUILD_DIR"/bin/ropeserve --backend=cpu --enable_echo
after_target=$ROPESERVE_TARGET
for round in $(seq 1 "$ROUNDS"); do
  for server in before after; do
    target=$before_target
    [ "$server" = after ] && target=$after_target
    timeout 300 "$BUILD_DIR"/bin/service_bench --target="$target" --sizes=16KiB,4MiB \
      --seconds_per_case="${SECONDS_PER_CASE:-1}" --out="$work/$server.$round.json" >/dev/null
  done
done
mkdir -p "$(dirname "$OUT")"
/usr/bin/python3 bench/summarize_before_after.py "$work" "$ROUNDS" "$OUT.json" \
  "${LABEL:-the change}" > "$OUT.md"
cat "$OUT.md"
