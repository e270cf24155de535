#!/usr/bin/env bash
# Sets up, builds and runs every test of ropeserve:
#   0. scripts/check_layers.sh: the layering of the #includes (and its
#      self-test), first because it needs no build and takes a second;
#   1. ctest (unit, service, client, e2e, load, deploy scale-out, cuda host
#      tests, fuzz-corpus replay) in ${BUILD_DIR:-build};
#   2. scripts/k8s_check.sh: Kubernetes manifests and compose file;
#   3. scripts/container_test.sh: builds the CPU image with podman and runs it
#      (needs root; a few minutes);
#   4. scripts/sanitize.sh: the test suite again under ASan + UBSan;
#   5. scripts/tsan.sh: the concurrency tests (cache, thread pool, CPU
#      backend, call gate, work queue) under ThreadSanitizer (builds Debian's
#      Abseil source with TSan once, ~1 min);
#   6. scripts/fuzz.sh: the libFuzzer target for FUZZ_SECONDS (60).
# ROPE_SKIP_CONTAINER_TEST=1, ROPE_SKIP_SANITIZE=1, ROPE_SKIP_TSAN=1 and
# ROPE_SKIP_FUZZ=1 skip steps 3-6 for quick local runs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/check_layers.sh
./scripts/check_layers.sh --self-test
./scripts/setup.sh
./scripts/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j"$(nproc)" --timeout 600)
./scripts/k8s_check.sh
if [ "${ROPE_SKIP_CONTAINER_TEST:-0}" = 1 ]; then
  echo "test.sh: container test skipped (ROPE_SKIP_CONTAINER_TEST=1)"
elif [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: container test skipped: it needs root (podman, debootstrap)"
else
  ./scripts/container_test.sh
fi
if [ "${ROPE_SKIP_SANITIZE:-0}" = 1 ]; then
  echo "test.sh: sanitizer run skipped (ROPE_SKIP_SANITIZE=1)"
else
  ./scripts/sanitize.sh
fi
if [ "${ROPE_SKIP_TSAN:-0}" = 1 ]; then
  echo "test.sh: ThreadSanitizer run skipped (ROPE_SKIP_TSAN=1)"
else
  ./scripts/tsan.sh
fi
if [ "${ROPE_SKIP_FUZZ:-0}" = 1 ]; then
  echo "test.sh: fuzzing skipped (ROPE_SKIP_FUZZ=1)"
else
  FUZZ_SECONDS=${FUZZ_SECONDS:-60} ./scripts/fuzz.sh
fi
