#!/usr/bin/env bash
# Configures and builds ropeserve (Release) into ${BUILD_DIR:-build}.
#
#   scripts/build.sh [--target TARGET]... [CMAKE_ARGS...]
#
# Each --target builds that target only (default: everything); the other
# arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
targets=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target) targets+=(--target "$2"); shift 2 ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "${cmake_args[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
