#!/usr/bin/env bash
# ropeserve against a Python grpcio + torch server doing the same work
# (bench/torch_server/torch_rope_server.py), both driven by ropeload with the
# same flags, one scenario at a time, alternating servers, ROUNDS times.
# Writes bench/results/torch_server_bench.json (every ropeload step) and
# bench/results/torch_server_bench.md (throughput and latency ratios, medians
# over rounds).
#
# Environment: BUILD_DIR (build), DURATION per step (10s), WARMUP (1s),
# ROUNDS (3), SKIP_BUILD=1 to use the binaries as they are, ROPESERVE (a
# ropeserve binary to measure instead of BUILD_DIR's, e.g. an older build)
# and NAME (torch_server_bench: the results' file name).
# Needs Debian's python3-torch and python3-grpcio.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
ROUNDS=${ROUNDS:-3}
ROPESERVE=${ROPESERVE:-$BUILD_DIR/bin/ropeserve}
NAME=${NAME:-torch_server_bench}
if ! /usr/bin/python3 -c 'import torch, grpc' 2>/dev/null; then
  echo "run_torch_server_bench.sh: needs python3-torch and python3-grpcio (apt-get install)" >&2
  exit 1
fi
if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target ropeserve ropeload -j"$(nproc)"
fi
work=$(mktemp -d)
torch_pid=""
cleanup() {
  [ -n "$torch_pid" ] && kill -TERM "$torch_pid" 2>/dev/null && wait "$torch_pid" 2>/dev/null
  stop_ropeserve >/dev/null 2>&1 || true
  rm -rf "$work"
}
. scripts/lib/ropeserve.sh
trap cleanup EXIT

start_ropeserve "$ROPESERVE" --backend=cpu
rope_target=$ROPESERVE_TARGET
/usr/bin/python3 client/python/build_proto.py --out "$work/stubs" --proto-dir proto >/dev/null
/usr/bin/python3 bench/torch_server/torch_rope_server.py --stubs="$work/stubs" \
  >"$work/torch.log" 2>&1 &
torch_pid=$!
torch_target=""
for _ in $(seq 1 600); do
  torch_target=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/torch.log" | head -n1)
  [ -n "$torch_target" ] && break
  kill -0 "$torch_pid" 2>/dev/null || { cat "$work/torch.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$torch_target" ] || { echo "torch server did not start" >&2; exit 1; }

# name | ropeload flags
scenarios=(
  "decode_bf16|--random_q_shape=1,1,32,128 --random_k_shape=1,1,8,128 --dtype=bfloat16 --theta=500000 --max_len=8192 --start_pos=4000 --payloads=8 -c 8 --connections=2"
  "prefill_f32|--random_q_shape=1,2048,32,128 --random_k_shape=1,2048,8,128 --dtype=float32 --theta=500000 --max_len=8192 -c 2"
  "prefill_bf16_llama3|--random_q_shape=1,2048,32,128 --random_k_shape=1,2048,8,128 --dtype=bfloat16 --theta=500000 --max_len=131072 --rope-scaling=llama3 --factor=8 -c 2"
  "scores_causal_softmax|--workload=scores --random_q_shape=1,256,8,128 --random_k_shape=1,256,8,128 --causal --softmax -c 4"
)
mkdir -p bench/results
for round in $(seq 1 "$ROUNDS"); do
  for entry in "${scenarios[@]}"; do
    name=${entry%%|*}
    flags=${entry#*|}
    for server in ropeserve torch; do
      target=$rope_target
      [ "$server" = torch ] && target=$torch_target
      echo "== round $round: $name on $server"
      # shellcheck disable=SC2086
      "$BUILD_DIR"/bin/ropeload --target="$target" --noprogress --warmup="$WARMUP" \
        -z "$DURATION" --json="$work/${name}.${server}.${round}.json" $flags \
        >/dev/null 2>>"$work/ropeload.log"  # (the torch server has no grpc.health.v1: a log line)
    done
  done
done
/usr/bin/python3 bench/summarize_torch_server_bench.py "$work" "$ROUNDS" "$ROPESERVE" \
  bench/results/"$NAME".json > bench/results/"$NAME".md
cat bench/results/"$NAME".md
