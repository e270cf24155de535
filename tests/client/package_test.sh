#!/usr/bin/env bash
# The C++ client as an installed CMake package, as a user would take it:
# installs the "client" component of BUILD_DIR into a temporary prefix,
# builds client/examples/cpp against it alone (find_package(ropeserve CONFIG)
# + ropeserve::client), and runs the example against a ropeserve on
# 127.0.0.1, expecting a rotated tensor back.
#
#   package_test.sh BUILD_DIR ROPESERVE CXX_COMPILER [COMPILER_LAUNCHER]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=$1
ROPESERVE=$2
CXX_COMPILER=$3
LAUNCHER=${4:-}

WORK=$(mktemp -d /tmp/ropeserve-package-test.XXXXXX)
. "$ROOT/scripts/lib/ropeserve.sh"
cleanup() {
  stop_ropeserve >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "package_test: cmake --install $BUILD_DIR --component client --prefix $WORK/prefix"
cmake --install "$BUILD_DIR" --component client --prefix "$WORK/prefix" >"$WORK/install.log"
[ -f "$WORK/prefix/lib/cmake/ropeserve/ropeserveConfig.cmake" ] \
  || { cat "$WORK/install.log"; echo "package_test: FAIL: no ropeserveConfig.cmake installed" >&2; exit 1; }

echo "package_test: building client/examples/cpp against the prefix"
# Only the prefix: the example must not find anything in the source or build tree.
if ! cmake -S "$ROOT/client/examples/cpp" -B "$WORK/example" -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_CXX_COMPILER="$CXX_COMPILER" ${LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER="$LAUNCHER"} \
       -DCMAKE_PREFIX_PATH="$WORK/prefix" >"$WORK/configure.log" 2>&1 ||
   ! cmake --build "$WORK/example" >"$WORK/build.log" 2>&1; then
  cat "$WORK/configure.log" "$WORK/build.log" 2>/dev/null | tail -n 40 >&2
  echo "package_test: FAIL: the example does not build against the installed package" >&2
  exit 1
fi

start_ropeserve "$ROPESERVE" --backend=cpu --cpu_threads=1 --work_threads=1
output=$(timeout 60 "$WORK/example/rotate_example" "$ROPESERVE_TARGET")
echo "$output"
grep -q "^rotated q \[1,16,8,64\] float32: first values" <<<"$output" \
  || { echo "package_test: FAIL: unexpected output from rotate_example" >&2; exit 1; }
stop_ropeserve
echo "package_test: PASS"
