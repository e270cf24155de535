#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the demo need.
# Idempotent: does nothing (not even `apt-get update`) when all are present.
# Needs root (or sudo) only when something is missing.
#   --build      only what building needs (the Dockerfile's build stage):
#                skips TEST_ONLY_PACKAGES, which are large;
#   --test-only  only TEST_ONLY_PACKAGES (scripts/test.sh installs them
#                beside the compile, after --build).
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake pkg-config git
  # gRPC, protobuf, Abseil; nlohmann-json parses models' config.json
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev grpc-proto
  nlohmann-json3-dev
  # SLEEF: the float32 powf / cosf / sinf of torch's CPU kernels (angle_precision FLOAT32)
  libsleef-dev
  # metrics (prometheus-cpp's registry, served by libmicrohttpd), BLAS; TLS (certificate checks at startup, and the openssl CLI
  # that makes throw-away certificates in the tests); Google Highway (the CPU
  # backend's SIMD kernels, one per instruction set, chosen at run time)
  prometheus-cpp-dev libmicrohttpd-dev libopenblas-dev libssl-dev openssl libhwy-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # libFuzzer (scripts/fuzz.sh): clang 14 and its sanitizer/fuzzer runtimes
  clang libclang-rt-14-dev
  # Python peer (client/python) and numpy oracle used by the e2e tests
  python3 python3-grpcio python3-numpy python3-protobuf
  # the ropeserve Python package: pip install into a venv (python3-venv,
  # python3-setuptools, python3-wheel) and its pytest suite; torch tensors
  # come with TEST_ONLY_PACKAGES below
  python3-venv python3-setuptools python3-wheel python3-pytest
  # tools used by scripts and tests
  curl procps
  # perf_analyzer (from PyPI's tritonclient wheel, tests/kserve) links it
  libb64-0d
  # the front proxy of the deployments (deploy/proxy/haproxy.cfg) and the
  # hostile-client tests (tests/hostile): raw HTTP/2 (python3-h2), prlimit
  haproxy python3-h2 util-linux
)
# python3-torch: the torch oracle of tests/e2e/hf_models_test.py
# (transformers' apply functions re-implemented in torch) and the Python
# package's torch tensors; about 1 GB installed, the largest package here,
# so not in image builds.
# yamllint and python3-yaml: scripts/k8s_check.sh.
# nginx-light: the comparison front of bench/front_proxy.py.
TEST_ONLY_PACKAGES=(python3-torch yamllint python3-yaml nginx-light)
case "${1:-}" in
  "") PACKAGES+=("${TEST_ONLY_PACKAGES[@]}") ;;
  --build) ;;
  --test-only) PACKAGES=("${TEST_ONLY_PACKAGES[@]}") ;;
  *) echo "usage: scripts/setup.sh [--build | --test-only]" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "setup: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
