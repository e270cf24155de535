#!/usr/bin/env bash
# The standard ropeload scenarios against a freshly started ropeserve on
# 127.0.0.1. Writes OUT_DIR/ropeload_<scenario>.{json,html,txt} (and a CSV
# for the sweep); OUT_DIR defaults to BUILD_DIR/ropeload_scenarios, so that a
# trial run leaves the tracked figures in bench/results alone (OUT_DIR=bench/results
# records a new set there):
#   decode   Rotate, one new token: q [1,1,32,128], k [1,1,8,128] bf16 at
#            position 4000 (Llama-3-8B-like heads), closed loop c=8, 2 connections
#   decode_open  the same, open loop at DECODE_RPS Poisson arrivals
#   prefill  Rotate, a 2048-token prompt: q [1,2048,32,128], k [1,2048,8,128] bf16, c=2
#   scores   AttentionScores, causal softmax: q [1,256,8,64], k/v [1,256,2,64], c=4
#   sweep    decode, --concurrency-range=1:32:x2 with --max-p99=SLO_P99
# Environment: BUILD_DIR (default build), DURATION per step (default 5s),
# WARMUP (1s), BACKEND (auto), DECODE_RPS (1000), SLO_P99 (50ms), OUT_DIR,
# SKIP_BUILD=1 to use the binaries as they are.
# Numbers from a shared machine are noisy: compare runs on one machine only.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
BACKEND=${BACKEND:-auto}
DECODE_RPS=${DECODE_RPS:-1000}
SLO_P99=${SLO_P99:-50ms}
if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target ropeserve ropeload -j"$(nproc)"
fi
out=${OUT_DIR:-$BUILD_DIR/ropeload_scenarios}
mkdir -p "$out"
echo "run_scenarios.sh: reports go to $out"
. scripts/lib/ropeserve.sh
trap 'stop_ropeserve >/dev/null || true' EXIT
start_ropeserve "$BUILD_DIR"/bin/ropeserve --backend="$BACKEND"
target=$ROPESERVE_TARGET

# run NAME FLAGS...: one scenario, its summary on stdout and in NAME.txt.
run() {
  local name=$1
  shift
  echo "== $name"
  "$BUILD_DIR"/bin/ropeload --target="$target" --noprogress --warmup="$WARMUP" \
    --json="$out/ropeload_$name.json" --html="$out/ropeload_$name.html" "$@" |
    tee "$out/ropeload_$name.txt"
}

decode=(--random_q_shape=1,1,32,128 --random_k_shape=1,1,8,128 --dtype=bfloat16
        --theta=500000 --max_len=8192 --start_pos=4000 --payloads=8)
run decode "${decode[@]}" -c 8 --connections=2 -z "$DURATION" --verify=20
run decode_open "${decode[@]}" --rps="$DECODE_RPS" --poisson --connections=2 -z "$DURATION"
run prefill --random_q_shape=1,2048,32,128 --random_k_shape=1,2048,8,128 --dtype=bfloat16 \
  --theta=500000 --max_len=8192 -c 2 -z "$DURATION" --verify=5
run scores --workload=scores --random_q_shape=1,256,8,64 --random_k_shape=1,256,2,64 \
  --random_v_shape=1,256,2,64 --causal --softmax -c 4 -z "$DURATION" --verify=5
run sweep "${decode[@]}" --concurrency-range=1:32:x2 --connections=2 -z "$DURATION" \
  --max-p99="$SLO_P99" --csv="$out/ropeload_sweep.csv"
echo "wrote $out/ropeload_*.{json,html,txt} and $out/ropeload_sweep.csv"
