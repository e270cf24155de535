#!/usr/bin/env bash
# The causal prefill of bench/attention_bench.cc (OUTPUT + LSE, Hq 32, Hkv 8,
# D 128, float32 and bfloat16, one thread and all) and torch's eager
# matmul-softmax-matmul on the same case (bench/torch_attention_bench.py),
# back to back in one session, at one length for both (LEN, 2048 by
# default: torch's eager bfloat16 attention alone takes about a minute at
# 4096 on a shared 2-core machine, and several at 8192). Writes bench/results/attention_vs_torch.json
# (ours and torch's rows) and prints both.
#
# Environment: BUILD_DIR (build), LEN (2048), REPEATS (1).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
LEN=${LEN:-2048}
REPEATS=${REPEATS:-1}
cmake --build "$BUILD_DIR" --target attention_bench -j2 >/dev/null
mkdir -p bench/results
ours=$(mktemp)
trap 'rm -f "$ours" "$ours.torch"' EXIT
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$BUILD_DIR"/bin/attention_bench --cases=prefill --prefill_len="$LEN" --repeats="$REPEATS" > "$ours"
/usr/bin/python3 bench/torch_attention_bench.py --len="$LEN" --repeats="$REPEATS" \
  --out="$ours.torch"
/usr/bin/python3 - "$ours" "$ours.torch" > bench/results/attention_vs_torch.json <<'PY'
import json, sys
ours = json.load(open(sys.argv[1]))
torch = json.load(open(sys.argv[2]))
print(json.dumps({"ropeserve": ours, "torch": torch}, indent=1))
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
cat bench/results/attention_vs_torch.json
