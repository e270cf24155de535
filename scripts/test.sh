#!/usr/bin/env bash
# Sets up, builds and runs every test of ropeserve: ctest, then the
# deployment checks (scripts/k8s_check.sh: Kubernetes manifests and compose
# file) and the container test (scripts/container_test.sh: builds the CPU
# image with podman and runs it; needs root, takes a few minutes).
# ROPE_SKIP_CONTAINER_TEST=1 skips the container test for quick local runs.
set -euo pipefail
cd "$(dirname "$0")/.."
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
