#!/usr/bin/env bash
# ModelInfer (KServe v2 / Triton, the built-in "rotate" model) vs the rope.v1
# Rotate it stands for, through one ropeserve process (CPU backend) and one
# client process on 127.0.0.1, in interleaved rounds. Writes
# bench/results/kserve_bench.json and bench/results/kserve_bench.md (the
# machine, its load, and the ratios with met/missed against 1.1x).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target ropeserve kserve_bench -j"$(nproc)"
mkdir -p bench/results
. scripts/lib/ropeserve.sh
trap 'stop_ropeserve >/dev/null || true' EXIT
start_ropeserve "$BUILD_DIR"/bin/ropeserve --backend=cpu
load=$(cut -d' ' -f1-3 /proc/loadavg)
table=$("$BUILD_DIR"/bin/kserve_bench --target="$ROPESERVE_TARGET" \
  --out=bench/results/kserve_bench.json --rounds="${ROUNDS:-9}" \
  --seconds_per_case="${SECONDS_PER_CASE:-1}")
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
{
  echo "# ModelInfer vs rope.v1 Rotate"
  echo
  echo "Measured $(date -u +%Y-%m-%d) by bench/run_kserve_bench.sh on $(nproc) vCPUs of a"
  echo "$cpu (load average at the start: $load), one ropeserve"
  echo "(--backend=cpu, defaults) and one client process (bench/kserve_bench.cc) on 127.0.0.1."
  echo "Each case: float32 q [B,S,32,128] and k [B,S,8,128], theta 500000, start_pos 100;"
  echo "ModelInfer to the built-in \"rotate\" model with the configuration as request"
  echo "parameters, Rotate with the same tensors and config. ${ROUNDS:-9} rounds of"
  echo "${SECONDS_PER_CASE:-1} s per RPC and case, the two RPCs back to back in each (alternating"
  echo "which goes first); medians over rounds of p50 latency (1 call in flight) and calls/s"
  echo "(4 in flight), and of each round's ModelInfer/Rotate ratios. Target: ModelInfer within"
  echo "1.1x of Rotate, i.e. latency ratio <= 1.1 and throughput ratio >= 0.909."
  echo
  echo "$table"
} > bench/results/kserve_bench.md
cat bench/results/kserve_bench.md
