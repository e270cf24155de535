#!/usr/bin/env bash
# The main job: set up, build, start ropeserve on the CPU backend on
# 127.0.0.1, call it with ropectl (rotate and attention scores on a
# Llama-3-like config: theta 500000, head_dim 128, GQA 32 query / 8 kv
# heads), print the results, and stop the server with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
SERVER="$BUILD_DIR/bin/ropeserve"
CTL="$BUILD_DIR/bin/ropectl"

. scripts/lib/ropeserve.sh
trap 'stop_ropeserve >/dev/null || true' EXIT
start_ropeserve "$SERVER" --backend=cpu --metrics_port=0
target=$ROPESERVE_TARGET
echo "== ropeserve is up at $target (CPU backend)"

LLAMA3=(--target="$target" --theta=500000 --head_dim=128 --max_len=8192)
set -x
"$CTL" health --target="$target"
"$CTL" info --target="$target"
"$CTL" rotate "${LLAMA3[@]}" --random_q_shape=1,16,32,128 --random_k_shape=1,16,8,128 \
  --seed=1 --start_pos=100
"$CTL" scores "${LLAMA3[@]}" --random_q_shape=1,16,32,128 --random_k_shape=1,16,8,128 \
  --seed=2 --causal --softmax
"$CTL" table "${LLAMA3[@]}" --start=131 --count=2
set +x

trap - EXIT
stop_ropeserve && echo "== ropeserve drained and exited 0 on SIGTERM"
