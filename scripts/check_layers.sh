#!/usr/bin/env bash
# Checks that the floors of the tree include one another only downwards
# (docs/design.md, "The code, one folder per layer"):
#
#   server/ (service, main.cc)      client/ (library, ropectl, ropeload)
#          \                          /
#           core/proto_engine  (rope.v1 messages <-> the engine; no gRPC)
#                  |
#           core/backends      (cpu, cuda: where the arithmetic runs)
#                  |
#           core/engine        (validation, tables, cache, the Backend interface)
#                  |
#           common/            (status macros, half_float, ThreadPool)
#
# Fails (exit 1, one line per finding: file:line, the include, the rule) when
#   1. a client/ file includes a server/ header, or core/ other than
#      core/proto_engine/ (the client's one door into the core);
#   2. a server/ file includes a client/ header;
#   3. a file of core/ or common/ includes a grpcpp header;
#   4. a file of core/engine, core/backends or common/ includes a generated
#      .pb.h (protobuf stops at core/proto_engine);
#   5. a common/ file includes any other floor;
#   6. a core/engine file includes core/backends, core/proto_engine,
#      server/ or client/ (the engine sees backends only through Backend);
#   7. a core/backends file includes core/proto_engine, server/ or client/;
#      a backend includes another backend's folder;
#   8. a core/proto_engine file includes server/ or client/;
#   9. ropectl (client/cli/) and ropeload (client/load/) include each
#      other's files (what they share is in client/flags/), or the client
#      library (client/*.h, client/flags/) includes either.
#
#   scripts/check_layers.sh [ROOT]     check the tree at ROOT (default: this repository)
#   scripts/check_layers.sh --self-test
#       plants one violation of each rule in a copy of the tree and fails
#       unless the check catches every one (and passes the unmodified copy).
#
# Reads #include lines only (no compiler needed): cheap enough to run first
# in scripts/test.sh.
set -euo pipefail

FLOORS=(client common core server)

# check ROOT: prints the findings, returns 1 if there are any.
check() {
  local root=$1
  (cd "$root" &&
    find "${FLOORS[@]}" -type f \( -name '*.h' -o -name '*.cc' \
      -o -name '*.cu' -o -name '*.cuh' \) -print0 2>/dev/null | sort -z |
    xargs -0 -r grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' || true) |
  awk -F: '
    function finding(rule) {
      printf "check_layers: %s:%s: includes %s (%s)\n", file, line, inc, rule
      found = 1
    }
    {
      file = $1; line = $2
      text = substr($0, length($1) + length($2) + 3)
      inc = text
      sub(/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]/, "", inc)
      sub(/[>"].*$/, "", inc)
      in_core = file ~ /^core\//
      in_engine = file ~ /^core\/engine\//
      in_backends = file ~ /^core\/backends\//
      in_proto_engine = file ~ /^core\/proto_engine\//
      in_common = file ~ /^common\//
      if (file ~ /^client\// && inc ~ /^server\//) finding("client/ must not include server/")
      if (file ~ /^client\// && inc ~ /^core\// && inc !~ /^core\/proto_engine\//)
        finding("client/ reaches core/ only through core/proto_engine/")
      if (file ~ /^server\// && inc ~ /^client\//) finding("server/ must not include client/")
      if (file ~ /^client\/(cli\/|[^\/]*$)/ && inc ~ /^client\/load\//)
        finding("only ropeload includes client/load/ (shared code goes in client/flags/)")
      if (file ~ /^client\/(load\/|flags\/|[^\/]*$)/ && file !~ /^client\/ropectl\.cc$/ && inc ~ /^client\/cli\//)
        finding("only ropectl includes client/cli/ (shared code goes in client/flags/)")
      if ((in_core || in_common) && inc ~ /^grpcpp\//) finding("no grpcpp below the service")
      if ((in_engine || in_backends || in_common) && inc ~ /\.pb\.h$/)
        finding("no generated .pb.h in the engine, the backends or common")
      if (in_common && inc ~ /^(server|client|core)\//)
        finding("common/ is the base: it includes no other floor")
      if (in_engine && inc ~ /^(core\/backends|core\/proto_engine|server|client)\//)
        finding("core/engine/ includes only core/engine/ and common/")
      if (in_backends && inc ~ /^(core\/proto_engine|server|client)\//)
        finding("core/backends/ includes only core/backends/, core/engine/ and common/")
      if (in_backends && inc ~ /^core\/backends\//) {
        split(file, f, "/"); split(inc, g, "/")
        if (f[3] != g[3]) finding("a backend does not include another backend")
      }
      if (in_proto_engine && inc ~ /^(server|client)\//)
        finding("core/proto_engine/ must not include server/ or client/")
    }
    END { exit found }'
}

self_test() {
  local repo=$1 work failures=0
  work=$(mktemp -d /tmp/ropeserve-check-layers.XXXXXX)
  trap 'rm -rf "$work"' RETURN
  copy() {  # a fresh copy of the floors' sources in $work/tree
    rm -rf "$work/tree"
    mkdir -p "$work/tree"
    local floor
    for floor in "${FLOORS[@]}"; do cp -r "$repo/$floor" "$work/tree/"; done
  }
  copy
  if ! check "$work/tree" >"$work/out"; then
    cat "$work/out" >&2
    echo "check_layers: self-test: FAIL: the unmodified copy does not pass" >&2
    return 1
  fi
  # file to plant in|include line|the rule's words the finding must carry
  local plants=(
    "client/rope_client.cc|#include \"server/service/rope_service.h\"|client/ must not include server/"
    "client/rope_client.cc|#include \"core/engine/engine.h\"|client/ reaches core/ only through"
    "client/cli/cmd_rotate.cc|#include \"core/backends/cpu/cpu_backend.h\"|client/ reaches core/ only through"
    "server/service/rope_service.cc|#include \"client/rope_client.h\"|server/ must not include client/"
    "core/engine/engine.cc|#include <grpcpp/grpcpp.h>|no grpcpp below the service"
    "core/backends/cpu/cpu_backend.h|#include \"grpcpp/server.h\"|no grpcpp below the service"
    "common/thread_pool.cc|#include <grpcpp/channel.h>|no grpcpp below the service"
    "core/proto_engine/rope_calls.cc|#  include \"grpcpp/support/status.h\"|no grpcpp below the service"
    "core/engine/engine.h|#include \"rope/v1/rope.pb.h\"|no generated .pb.h"
    "core/backends/cpu/cpu_rotate.cc|#include \"grpc/health/v1/health.pb.h\"|no generated .pb.h"
    "common/half_float.h|#include \"rope/v1/rope.pb.h\"|no generated .pb.h"
    "common/defaults.h|#include \"core/engine/dtype.h\"|common/ is the base"
    "core/engine/engine.cc|#include \"core/backends/cpu/cpu_backend.h\"|core/engine/ includes only"
    "core/engine/validation.cc|#include \"core/proto_engine/rope_calls.h\"|core/engine/ includes only"
    "core/engine/engine.h|#include \"server/service/rope_service.h\"|core/engine/ includes only"
    "core/backends/cpu/cpu_backend.cc|#include \"core/proto_engine/request_conversion.h\"|core/backends/ includes only"
    "core/backends/cuda/cuda_backend.cc|#include \"core/backends/cpu/cpu_kernels.h\"|a backend does not include another backend"
    "core/proto_engine/local_engine.cc|#include \"server/service/rope_service.h\"|core/proto_engine/ must not include"
    "core/proto_engine/rope_calls.cc|#include \"client/rope_client.h\"|core/proto_engine/ must not include"
    "client/load/workload.cc|#include \"client/cli/commands.h\"|only ropectl includes client/cli/"
    "client/cli/cmd_rotate.cc|#include \"client/load/workload.h\"|only ropeload includes client/load/"
  )
  local spec file text rule
  for spec in "${plants[@]}"; do
    IFS='|' read -r file text rule <<<"$spec"
    copy
    if [ ! -f "$work/tree/$file" ]; then
      echo "check_layers: self-test: FAIL: $file, where a violation is planted, does not exist" >&2
      failures=$((failures + 1))
      continue
    fi
    printf '%s\n' "$text" >>"$work/tree/$file"
    if check "$work/tree" >"$work/out"; then
      echo "check_layers: self-test: FAIL: '$text' in $file was not caught" >&2
      failures=$((failures + 1))
    elif ! grep -qF "$file:" "$work/out" || ! grep -qF "$rule" "$work/out"; then
      cat "$work/out" >&2
      echo "check_layers: self-test: FAIL: '$text' in $file was not reported as '$rule'" >&2
      failures=$((failures + 1))
    fi
  done
  if [ "$failures" -gt 0 ]; then
    return 1
  fi
  echo "check_layers: self-test: PASS (${#plants[@]} planted violations caught, the unmodified tree passes)"
}

repo=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--self-test" ]; then
  self_test "$repo"
  exit
fi
root=${1:-$repo}
if check "$root"; then
  echo "check_layers: PASS (every include points down: server/ and client/ over core/proto_engine over core/backends over core/engine over common/)"
else
  echo "check_layers: FAIL: the includes above break the layering (see scripts/check_layers.sh)" >&2
  exit 1
fi
