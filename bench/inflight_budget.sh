#!/usr/bin/env bash
# --max_inflight_bytes at full size (docs/operations.md "Memory"):
#   1. host: 24 concurrent 256 MiB Rotate calls against a ropeserve with a
#      2 GiB in-flight budget and a 256 MiB table cache, one small Rotate every
#      20 ms throughout, the server's RSS sampled every 5 ms
#      (tests/load/inflight_budget_test.py + inflight_flood, the CI test's
#      driver at full size);
#   2. container (when podman and ROPE_IMAGE exist): the same against the
#      server in a podman container with a 3 GiB memory limit (the host's
#      ropeserve binary copied onto ROPE_IMAGE), checking no OOM kill;
#   3. the Rotate/Echo service benchmark with the budget off
#      (--max_inflight_bytes=0) and on (2 GiB), one after the other.
# Writes bench/results/inflight_budget.{json,md}. Needs ~8 GiB free memory
# (the client's replies, the server's 2 GiB + transport); check `free -g`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
IMAGE=${ROPE_IMAGE:-localhost/ropeserve:cpu}
CALLS=${CALLS:-24}
REQUEST_MIB=${REQUEST_MIB:-256}
BUDGET_MIB=${BUDGET_MIB:-2048}
TABLE_MIB=${TABLE_MIB:-256}
MARGIN_MIB=${MARGIN_MIB:-512}
OUT=bench/results
WORK=$(mktemp -d /tmp/inflight-budget.XXXXXX)
CONTAINER=ropeserve-inflight-$$
cleanup() {
  podman rm -f "$CONTAINER" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$OUT"
export PYTHONPATH=$PWD/tests/support/python

echo "inflight_budget: host: $CALLS x $REQUEST_MIB MiB against $BUDGET_MIB MiB"
/usr/bin/python3 tests/load/inflight_budget_test.py --ropeserve "$BUILD_DIR/bin/ropeserve" \
  --flood "$BUILD_DIR/bin/inflight_flood" --calls "$CALLS" --request_mib "$REQUEST_MIB" \
  --budget_mib "$BUDGET_MIB" --table_cache_mib "$TABLE_MIB" --margin_mib "$MARGIN_MIB" \
  --deadline_s 300 --json "$WORK/host.json" > "$WORK/host.log" 2>&1 \
  && host_pass=true || host_pass=false
tail -n 3 "$WORK/host.log"

container_pass=null
if command -v podman >/dev/null && podman image exists "$IMAGE" 2>/dev/null; then
  echo "inflight_budget: container: 3 GiB memory limit"
  cat > "$WORK/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF=$WORK/containers.conf
  cp "$BUILD_DIR/bin/ropeserve" "$WORK/ropeserve"
  printf 'FROM %s\nCOPY ropeserve /usr/local/bin/ropeserve\n' "$IMAGE" > "$WORK/Containerfile"
  timeout 300 podman build --isolation=chroot -q -t localhost/ropeserve:inflight-bench \
    -f "$WORK/Containerfile" "$WORK" > /dev/null
  timeout 120 podman run -d --name "$CONTAINER" --health-interval=disable \
    --memory=3g --memory-swap=3g --read-only --cap-drop=ALL -p 127.0.0.1::50051 \
    localhost/ropeserve:inflight-bench --backend=cpu --cpu_threads=2 --work_threads=2 \
    --max_inflight_bytes=$((BUDGET_MIB << 20)) --max_inflight_bytes_per_client=0 \
    --table_cache_bytes=$((TABLE_MIB << 20)) --shutdown_grace_period=5s > /dev/null
  port=$(timeout 30 podman port "$CONTAINER" 50051/tcp | head -n 1 | sed 's/.*://')
  for _ in $(seq 1 100); do
    podman logs "$CONTAINER" 2>&1 | grep -q "listening on" && break
    sleep 0.2
  done
  pid=$(podman inspect -f '{{.State.Pid}}' "$CONTAINER")
  timeout 400 "$BUILD_DIR/bin/inflight_flood" --target="127.0.0.1:$port" --calls="$CALLS" \
    --request_mib="$REQUEST_MIB" --server_pid="$pid" --deadline=300s > "$WORK/container.json"
  oom=$(podman inspect -f '{{.State.OOMKilled}}' "$CONTAINER")
  running=$(podman inspect -f '{{.State.Running}}' "$CONTAINER")
  timeout 60 podman stop -t 10 "$CONTAINER" > /dev/null
  exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$CONTAINER")
  podman logs "$CONTAINER" > "$WORK/container.log" 2>&1 || true
  /usr/bin/python3 - "$WORK/container.json" "$oom" "$running" "$exit_code" "$CALLS" <<'PY' \
    && container_pass=true || container_pass=false
import json, sys
r = json.load(open(sys.argv[1]))
r.update(oom_killed=sys.argv[2] == "true", running_after=sys.argv[3] == "true",
         exit_code=int(sys.argv[4]), memory_limit_bytes=3 << 30)
json.dump(r, open(sys.argv[1], "w"), indent=1)
codes = r["codes"]
ok = (not r["oom_killed"] and r["running_after"] and r["exit_code"] == 0
      and set(codes) <= {"OK", "8"} and sum(codes.values()) == int(sys.argv[5])
      and set(r["small"]["codes"]) == {"OK"})
print("container:", "PASS" if ok else "FAIL", json.dumps(r))
sys.exit(0 if ok else 1)
PY
  grep "max_inflight_bytes" "$WORK/container.log" || true
else
  echo "inflight_budget: container: SKIP (no podman or no image $IMAGE)"
fi

echo "inflight_budget: service bench, budget off then on"
. scripts/lib/ropeserve.sh
for budget in 0 $((BUDGET_MIB << 20)); do
  start_ropeserve "$BUILD_DIR/bin/ropeserve" --backend=cpu --enable_echo \
    --max_inflight_bytes=$budget
  "$BUILD_DIR/bin/service_bench" --target="$ROPESERVE_TARGET" \
    --out="$WORK/service_$budget.json" --seconds_per_case="${SECONDS_PER_CASE:-2}" > /dev/null
  stop_ropeserve > /dev/null || true
done

/usr/bin/python3 - "$WORK" "$OUT" "$host_pass" "$container_pass" "$((BUDGET_MIB << 20))" <<'PY'
import json, os, sys
work, out, host_pass, container_pass, budget = sys.argv[1:6]
def load(name):
    path = os.path.join(work, name)
    return json.load(open(path)) if os.path.exists(path) else None
bench = {"off": load("service_0.json"), "on": load("service_%s.json" % budget)}
json.dump({"host": load("host.json"), "host_pass": host_pass == "true",
           "container": load("container.json"),
           "container_pass": None if container_pass == "null" else container_pass == "true",
           "service_bench": bench}, open(os.path.join(out, "inflight_budget.json"), "w"), indent=1)
PY
/usr/bin/python3 bench/summarize_inflight_budget.py "$OUT/inflight_budget.json" \
  > "$OUT/inflight_budget.md"
cat "$OUT/inflight_budget.md"
$host_pass
