#!/usr/bin/env bash
# Checks that the layers include one another only one way (docs/design.md):
#
#   proto -> service -> proto_engine -> engine -> backend -> kernels,
#   with common/ the base of both the server and the client.
#
# Fails (exit 1, one line per finding: file:line, the include, the rule) when
#   1. a client/ file includes a server/ header;
#   2. a server/ file includes a client/ header;
#   3. a file below the service (server/engine, server/backends, common,
#      proto_engine) includes a grpcpp header;
#   4. a file in server/engine, server/backends or common includes a
#      generated .pb.h;
#   5. a common/ file includes a header of any other layer (server/, client/,
#      proto_engine/);
#   6. a proto_engine/ file includes a client/ or server/service/ header.
#
#   scripts/check_layers.sh [ROOT]     check the tree at ROOT (default: this repository)
#   scripts/check_layers.sh --self-test
#       plants one violation of each rule in a copy of the tree and fails
#       unless the check catches every one (and passes the unmodified copy).
#
# Reads #include lines only (no compiler needed): cheap enough to run first
# in scripts/test.sh.
set -euo pipefail

# check ROOT: prints the findings, returns 1 if there are any.
check() {
  local root=$1
  (cd "$root" &&
    find client common proto_engine server -type f \( -name '*.h' -o -name '*.cc' \
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
      below_service = file ~ /^(server\/engine|server\/backends|common|proto_engine)\//
      engine_level = file ~ /^(server\/engine|server\/backends|common)\//
      if (file ~ /^client\// && inc ~ /^server\//) finding("client/ must not include server/")
      if (file ~ /^server\// && inc ~ /^client\//) finding("server/ must not include client/")
      if (below_service && inc ~ /^grpcpp\//) finding("no grpcpp below the service")
      if (engine_level && inc ~ /\.pb\.h$/)
        finding("no generated .pb.h in the engine, the backends or common")
      if (file ~ /^common\// && inc ~ /^(server|client|proto_engine)\//)
        finding("common/ is the base: it includes no other layer")
      if (file ~ /^proto_engine\// && inc ~ /^(client|server\/service)\//)
        finding("proto_engine/ must not include client/ or server/service/")
    }
    END { exit found }'
}

self_test() {
  local repo=$1 work failures=0
  work=$(mktemp -d /tmp/ropeserve-check-layers.XXXXXX)
  trap 'rm -rf "$work"' RETURN
  copy() {  # a fresh copy of the layers' sources in $work/tree
    rm -rf "$work/tree"
    mkdir -p "$work/tree"
    cp -r "$repo/client" "$repo/common" "$repo/proto_engine" "$repo/server" "$work/tree/"
  }
  copy
  if ! check "$work/tree" >"$work/out"; then
    cat "$work/out" >&2
    echo "check_layers: self-test: FAIL: the unmodified copy does not pass" >&2
    return 1
  fi
  # file to plant in|include line|the rule's words the finding must carry
  local plants=(
    "client/rope_client.cc|#include \"server/engine/engine.h\"|client/ must not include server/"
    "server/service/rope_service.cc|#include \"client/rope_client.h\"|server/ must not include client/"
    "server/engine/engine.cc|#include <grpcpp/grpcpp.h>|no grpcpp below the service"
    "server/backends/cpu/cpu_backend.h|#include \"grpcpp/server.h\"|no grpcpp below the service"
    "common/thread_pool.cc|#include <grpcpp/channel.h>|no grpcpp below the service"
    "proto_engine/rope_calls.cc|#  include \"grpcpp/support/status.h\"|no grpcpp below the service"
    "server/engine/engine.h|#include \"rope/v1/rope.pb.h\"|no generated .pb.h"
    "server/backends/cpu/cpu_rotate.cc|#include \"grpc/health/v1/health.pb.h\"|no generated .pb.h"
    "common/half_float.h|#include \"rope/v1/rope.pb.h\"|no generated .pb.h"
    "common/defaults.h|#include \"server/engine/dtype.h\"|common/ is the base"
    "proto_engine/local_engine.cc|#include \"server/service/rope_service.h\"|proto_engine/ must not include"
  )
  local spec file text rule
  for spec in "${plants[@]}"; do
    IFS='|' read -r file text rule <<<"$spec"
    copy
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
  echo "check_layers: PASS (client/ and server/ share code only through common/ and proto_engine/)"
else
  echo "check_layers: FAIL: the includes above break the layering (see scripts/check_layers.sh)" >&2
  exit 1
fi
