#!/usr/bin/env bash
# Fuzzes request parsing + conversion + validation + the CPU engine with
# libFuzzer, for a bounded time.
#
#   scripts/fuzz.sh                 # 60 s on each core
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#   FUZZ_JOBS=1 scripts/fuzz.sh     # one process (default: one per core)
#
# With more than one job, libFuzzer's fork mode runs that many fuzzing
# processes side by side and merges what they find into one corpus (a
# crash in any stops the run, as with one process); scripts/test.sh uses
# 30 s on CI's 2 cores, the 60 CPU-seconds one process had there.
#
# Builds tests/fuzz's rope_request_fuzzer with clang (-fsanitize=fuzzer plus
# ASan and UBSan on the project's code; Debian's gcc-built gRPC, protobuf and
# Abseil link fine against it) in ${FUZZ_BUILD_DIR:-build-fuzz}, with the CPU
# kernels for AVX2 and the baseline only (ROPE_HWY_DISABLED_TARGETS): the
# fuzzer runs the best path of the machine, AVX2 on CI, and each further
# Highway target costs some 2 CPU-minutes under clang's ASan + UBSan (the
# other paths run under ASan in scripts/sanitize.sh); regenerates
# the seed corpus tests/fuzz/corpus (deterministic: git shows no change unless
# the generator changed), then fuzzes starting from corpus/ and regressions/.
# New interesting inputs go to the build dir, never into the source tree.
#
# Fails (exit 1) on a crash, sanitizer report, leak, timeout or out-of-memory;
# the input that did it is copied into tests/fuzz/regressions/, where
# rope_fuzz_replay_test (a ctest test) replays it from then on: commit it with the
# fix. Reproduce with: build-fuzz/bin/rope_request_fuzzer FILE
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)}

CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" \
  -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DROPE_BUILD_FUZZERS=ON \
  -DROPE_SANITIZE=address,undefined \
  -DROPE_ENABLE_CUDA=OFF \
  -DROPE_BUILD_CLIENT=OFF \
  -DROPE_BUILD_BENCHMARKS=OFF -DROPE_TEST_PCH=OFF \
  -DROPE_HWY_DISABLED_TARGETS="(HWY_SSSE3|HWY_SSE4|HWY_AVX3|HWY_AVX3_DL)" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" \
  --target rope_request_fuzzer rope_fuzz_seed_corpus

"$BUILD_DIR/bin/rope_fuzz_seed_corpus" tests/fuzz/corpus

work="$BUILD_DIR/fuzz-work"          # inputs the fuzzer finds interesting
artifacts="$BUILD_DIR/fuzz-artifacts"
rm -rf "$artifacts"
mkdir -p "$work" "$artifacts"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "fuzz: running rope_request_fuzzer for ${FUZZ_SECONDS}s, $FUZZ_JOBS process(es)"
fork=()
if [ "$FUZZ_JOBS" -gt 1 ]; then fork=(-fork="$FUZZ_JOBS"); fi
status=0
# -timeout: one input may take at most 30 s (a hang is a finding too).
# -rss_limit_mb also caps any single malloc at 2 GiB.
"$BUILD_DIR/bin/rope_request_fuzzer" "${fork[@]}" \
  -max_total_time="$FUZZ_SECONDS" -max_len=65536 -rss_limit_mb=2048 -timeout=30 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" \
  "$work" tests/fuzz/corpus tests/fuzz/regressions || status=$?

if [ "$status" -ne 0 ]; then
  found=$(find "$artifacts" -type f | sort)
  for f in $found; do
    cp "$f" tests/fuzz/regressions/
    echo "fuzz: kept $(basename "$f") in tests/fuzz/regressions/ (rope_fuzz_replay_test replays it)" >&2
  done
  echo "fuzz: FAILED (exit $status); reproduce with $BUILD_DIR/bin/rope_request_fuzzer <input>" >&2
  exit 1
fi
echo "fuzz: no finding in ${FUZZ_SECONDS}s"
