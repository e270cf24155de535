#!/usr/bin/env bash
# AttentionScores through one ropeserve (CPU backend, all cores) with every
# tensor by shared-memory reference over a Unix socket
# (bench/attention_service_bench.cc): a causal prefill of PREFILL_LEN tokens
# (32768 by default) and a decode over DECODE_LEN keys (131072), OUTPUT +
# LSE written into registered regions, Hq 32, Hkv 8, D 128, bfloat16.
# Prints one JSON line per case. The prefill's one call is timed cold (its
# table blocks built in it: milliseconds beside the minutes of attention).
#
# Environment: BUILD_DIR (build), PREFILL_LEN, DECODE_LEN, PREFILL_CALLS (1),
# DECODE_CALLS (5).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake --build "$BUILD_DIR" --target ropeserve attention_service_bench -j2 >/dev/null
sock_dir=$(mktemp -d)
"$BUILD_DIR"/bin/ropeserve --backend=cpu --listen=unix://"$sock_dir"/rope.sock \
  --max_elements_per_request=$((1 << 34)) \
  --table_cache_bytes=$((1 << 30)) > "$sock_dir"/log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$sock_dir"' EXIT
for _ in $(seq 100); do
  grep -q "listening on" "$sock_dir"/log && break
  sleep 0.1
done
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
timeout 600 "$BUILD_DIR"/bin/attention_service_bench --target=unix://"$sock_dir"/rope.sock \
  --case_name=decode --len="${DECODE_LEN:-131072}" --calls="${DECODE_CALLS:-5}"
timeout 900 "$BUILD_DIR"/bin/attention_service_bench --target=unix://"$sock_dir"/rope.sock \
  --case_name=prefill --len="${PREFILL_LEN:-32768}" --calls="${PREFILL_CALLS:-1}" --warmup_calls=0
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
