#!/usr/bin/env bash
# Soak: one ropeserve (CPU backend) on 127.0.0.1 under mixed load for
# DURATION_S seconds while the table cache churns through 1000 distinct RoPE
# configs, with the server's memory and cache sampled throughout.
#
# Five ropeload processes run in parallel for the whole duration, each
# cycling its own --configs (theta + j) over a base config of its own
# (different head_dim / rotary_dim / max_len / scaling), so that together
# they use 1000 distinct table-cache keys:
#   decode   Rotate [1,1,32,128] bf16, llama3, max_len 8192     c=16, 2 conns, 250 configs
#   prefill  Rotate [1,1024,16,128] bf16, linear x2, max_len 4096 c=2,          250 configs
#   scores   AttentionScores [1,128,8,64] causal softmax + v, yarn, max_len 2048  c=4, 200 configs
#   stream   RotateStream [1,16,8,64] f32, rotary 64, max_len 16384  c=8,       200 configs
#   table    GetTable 64 rows, head_dim 64 rotary 32, max_len 1024   c=4,       100 configs
# Every ropeload also checks VERIFY replies against its local CPU engine.
# The table cache gets TABLE_CACHE_BYTES (default 64 MiB, far below the
# ~2.4 GiB the 1000 tables would need), so configs are evicted and rebuilt
# all the time.
#
# `bench/soak_report.py sample` reads the server's VmRSS (/proc/PID/status)
# and its /metrics (table-cache bytes, budget, entries, hits/misses/
# evictions, calls in flight, requests by code) every SAMPLE_S seconds.
# Pass criteria (bench/soak_report.py report): zero RPC errors (ropeload's
# counts and the server's non-OK counters), RSS growth after WARMUP_S below
# 5%, table-cache bytes never above the budget in any sample, ropeserve
# exits 0 on SIGTERM. Writes bench/results/soak.{json,md} and
# bench/results/soak_series.csv (OUT_PREFIX changes the names); exit status
# 0 when every criterion passes, 1 otherwise.
#
# Environment: BUILD_DIR (default build), DURATION_S (600), WARMUP_S (60),
# SAMPLE_S (2), TABLE_CACHE_BYTES (67108864), VERIFY (20 per ropeload),
# SERVER_FLAGS (more ropeserve flags, e.g. --max_connection_age=inf),
# OUT_PREFIX (bench/results/soak), SKIP_BUILD=1 to use the binaries as they
# are. Only 127.0.0.1 is used.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DURATION_S=${DURATION_S:-600}
WARMUP_S=${WARMUP_S:-60}
SAMPLE_S=${SAMPLE_S:-2}
TABLE_CACHE_BYTES=${TABLE_CACHE_BYTES:-67108864}
VERIFY=${VERIFY:-20}
OUT_PREFIX=${OUT_PREFIX:-bench/results/soak}
if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target ropeserve ropeload -j"$(nproc)"
fi
mkdir -p "$(dirname "$OUT_PREFIX")"
work=$(mktemp -d)
. scripts/lib/ropeserve.sh

sampler_pid=""
load_pids=()
cleanup() {
  for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null || true
  stop_ropeserve >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

metrics_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
start_ropeserve "$BUILD_DIR"/bin/ropeserve --backend=cpu \
  --metrics_host=127.0.0.1 --metrics_port="$metrics_port" \
  --table_cache_bytes="$TABLE_CACHE_BYTES" --shutdown_grace_period=30s \
  ${SERVER_FLAGS:+$SERVER_FLAGS}
target=$ROPESERVE_TARGET
server_pid=$ROPESERVE_PID
echo "ropeserve pid $server_pid on $target, metrics 127.0.0.1:$metrics_port," \
  "table cache $TABLE_CACHE_BYTES bytes; soak ${DURATION_S}s"

python3 bench/soak_report.py sample --pid="$server_pid" \
  --metrics="http://127.0.0.1:$metrics_port/metrics" --interval="$SAMPLE_S" \
  --max_seconds=$((DURATION_S + 120)) --csv="$work/series.csv" &
sampler_pid=$!

# load NAME FLAGS...: one ropeload for the whole soak, in the background.
load() {
  local name=$1
  shift
  "$BUILD_DIR"/bin/ropeload --target="$target" --noprogress -z "${DURATION_S}s" \
    --window=5s --verify="$VERIFY" --json="$work/$name.json" "$@" >"$work/$name.txt" 2>&1 &
  load_pids+=($!)
  echo "$name: ropeload $*" >>"$work/commands.txt"
}
load decode --random_q_shape=1,1,32,128 --random_k_shape=1,1,8,128 --dtype=bfloat16 \
  --theta=500000 --max_len=8192 --rope-scaling=llama3 --factor=8 --start_pos=4000 \
  --payloads=8 -c 16 --connections=2 --configs=250
load prefill --random_q_shape=1,1024,16,128 --random_k_shape=1,1024,4,128 --dtype=bfloat16 \
  --theta=10000 --max_len=4096 --rope-scaling=linear --factor=2 -c 2 --configs=250
load scores --workload=scores --random_q_shape=1,128,8,64 --random_k_shape=1,128,2,64 \
  --random_v_shape=1,128,2,64 --causal --softmax --theta=10000 --max_len=2048 \
  --rope-scaling=yarn --factor=4 --original_max_position_embeddings=512 -c 4 --configs=200
load stream --workload=rotate_stream --random_q_shape=1,16,8,64 --theta=10000 \
  --max_len=16384 --start_pos=12000 -c 8 --configs=200
load table --workload=table --head_dim=64 --rotary_dim=32 --theta=1000000 --max_len=1024 \
  --table_start=900 --table_count=64 -c 4 --configs=100

load_status=0
for pid in "${load_pids[@]}"; do wait "$pid" || load_status=1; done
load_pids=()
sleep "$SAMPLE_S"  # one more sample after the load
kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=""

server_exit=0
stop_ropeserve || server_exit=$?

python3 bench/soak_report.py report --series="$work/series.csv" --loads="$work" \
  --warmup_s="$WARMUP_S" --duration_s="$DURATION_S" --budget="$TABLE_CACHE_BYTES" \
  --server_exit="$server_exit" --load_exit="$load_status" --prefix="$OUT_PREFIX" \
  --server_flags="--backend=cpu --table_cache_bytes=$TABLE_CACHE_BYTES ${SERVER_FLAGS:-}"
