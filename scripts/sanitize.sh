#!/usr/bin/env bash
# Builds the tests labelled asan (cmake/RopeTestStages.cmake: the unit,
# service, client, load, cuda, fuzz and support tests, and the end-to-end
# ones that drive ropectl's and ropeload's own code) with AddressSanitizer +
# UndefinedBehaviorSanitizer (g++) in ${SANITIZE_BUILD_DIR:-build-asan}, and
# only what they need (target rope_tests_asan), then runs them with ctest.
#
#   scripts/sanitize.sh                                   # the asan label
#   scripts/sanitize.sh --build-only                      # build, run nothing
#   SANITIZE_CTEST_ARGS="-L unit" scripts/sanitize.sh     # other ctest arguments
#   SANITIZE_TARGETS=all SANITIZE_CTEST_ARGS= scripts/sanitize.sh  # every test
#
# The flags come from -DROPE_SANITIZE=address,undefined,float-cast-overflow
# (g++'s "undefined" leaves out float-to-int overflow, which clang's includes
# and which the fuzzer once found in the softmax), which
# cmake/RopeHelpers.cmake adds per target (-fsanitize=..., -fno-sanitize-recover=all,
# -fno-omit-frame-pointer) to the project's own code; Debian's prebuilt
# gRPC, protobuf, Abseil and OpenBLAS are not instrumented, but ASan still
# intercepts every malloc/free they make, and LeakSanitizer checks each test
# process at exit. A finding aborts the test that hit it.
#
# The CUDA backend is built when nvcc is found, with PTX for one
# architecture only (no GPU runs here): its host code runs on the fake CUDA
# runtime (rope_cuda_fake_device_test, rope_cuda_fake_device_process_test),
# whose "device" memory is host memory, so the sanitizers check every byte
# the backend's copies, GEMMs and host-emulated kernels touch.
#
# ThreadSanitizer runs separately, in scripts/tsan.sh: Debian's Abseil is
# built without TSan (absl::Mutex's lock and unlock would be invisible to it,
# and every ABSL_GUARDED_BY member would read as a race), so that script
# rebuilds Debian's Abseil source package with -fsanitize=thread and runs the
# engine, CPU backend and service-primitive concurrency tests against it. The
# gRPC service tests stay out of it: gRPC's own uninstrumented hand-offs
# between threads read as races (see scripts/tsan.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${SANITIZE_BUILD_DIR:-build-asan}
BUILD_ONLY=0
if [ "${1:-}" = "--build-only" ]; then BUILD_ONLY=1; fi

# -O1 -g1 (ASan's advice; line tables are enough for symbolized stack
# traces) compiles in about half the time of RelWithDebInfo's -O2 -g, the
# largest part of this script's time on CI's two cores.
cmake -S . -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DROPE_SANITIZE=address,undefined,float-cast-overflow \
  -DROPE_ENABLE_CUDA=AUTO -DCMAKE_CUDA_ARCHITECTURES=75-virtual \
  -DROPE_BUILD_BENCHMARKS=OFF >/dev/null
start=$SECONDS
cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${SANITIZE_TARGETS:-rope_tests_asan}"
echo "sanitize: built in $((SECONDS - start)) s"
[ "$BUILD_ONLY" = 0 ] || exit 0

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# OpenSSL's per-thread state that gRPC's threads leave at exit (lsan.supp says why).
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}
cd "$BUILD_DIR"
# Tests without a TIMEOUT of their own (GoogleTest suites have one, four
# times the plain build's here) get 20 minutes.
start=$SECONDS
# shellcheck disable=SC2086  # SANITIZE_CTEST_ARGS is a list of arguments
ctest --output-on-failure -j"$(nproc)" --timeout 1200 ${SANITIZE_CTEST_ARGS--L asan}
echo "sanitize: tests ran in $((SECONDS - start)) s"
