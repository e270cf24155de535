#!/usr/bin/env bash
# Sets up, builds and runs every test of ropeserve, one stage after another,
# and prints each stage's wall and CPU time (docs/testing.md, "Stages", says
# what each one guards):
#   layers     scripts/check_layers.sh and its self-test (no build needed);
#   setup      scripts/setup.sh (Debian packages);
#   build      scripts/build.sh into ${BUILD_DIR:-build} (Release);
#   ctest      every ctest test there (unit, service, client, load, e2e,
#              deploy, python, cuda host tests, fuzz-corpus replay);
#   k8s        scripts/k8s_check.sh: Kubernetes manifests and compose file;
#   container  scripts/container_test.sh: the CPU image, built with podman
#              from this build's binaries, run and checked (root only; its
#              tools and base image are prepared beside the build);
#   asan       scripts/sanitize.sh: the tests labelled asan under ASan + UBSan;
#   tsan       scripts/tsan.sh: the tests labelled tsan under ThreadSanitizer;
#   fuzz       scripts/fuzz.sh: libFuzzer, 60 CPU-seconds over all cores
#              (FUZZ_SECONDS: the wall time instead).
#
#   scripts/test.sh          everything (what CI runs: .ci/run)
#   scripts/test.sh --fast   the pre-commit run: layers, then the targets of
#                            the fast tests, then `ctest -L fast`
#
# ROPE_SKIP_CONTAINER_TEST=1, ROPE_SKIP_SANITIZE=1, ROPE_SKIP_TSAN=1 and
# ROPE_SKIP_FUZZ=1 skip those stages.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
FAST=0
case "${1:-}" in
  "") ;;
  --fast) FAST=1 ;;
  *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
esac

# --- stage timing --------------------------------------------------------------
# CPU seconds (user + sys) of this shell's finished children: `times` must run
# in this shell itself (a subshell starts from zero), so it writes to a file.
TIMES_FILE=$(mktemp /tmp/ropeserve-test-times.XXXXXX)
children_cpu() {
  tail -n 1 "$TIMES_FILE" | awk '{
    total = 0
    for (i = 1; i <= 2; i++) {
      split($i, part, "m"); sub("s", "", part[2]); total += part[1] * 60 + part[2]
    }
    printf "%.0f", total }'
}
SUMMARY=()
START=$SECONDS
summary() {
  echo "test.sh: stage        wall s   cpu s (user+sys)"
  local line
  for line in "${SUMMARY[@]}"; do echo "test.sh: $line"; done
  printf 'test.sh: %-11s %7d\n' total $((SECONDS - START))
}
# run_stage NAME COMMAND...: runs COMMAND (a script: its own set -e holds),
# records its times, and on failure prints the summary and exits with its status.
run_stage() {
  local name=$1 t0=$SECONDS c0 c1 status=0
  shift
  times > "$TIMES_FILE"
  c0=$(children_cpu)
  echo "test.sh: == $name: $*"
  "$@" || status=$?
  times > "$TIMES_FILE"
  c1=$(children_cpu)
  SUMMARY+=("$(printf '%-11s %7d %7d' "$name" $((SECONDS - t0)) $((c1 - c0)))$(
    [ $status -eq 0 ] || echo "   FAILED (exit $status)")")
  echo "test.sh: == $name: $((SECONDS - t0)) s"
  if [ $status -ne 0 ]; then
    summary
    exit $status
  fi
}
skip_stage() {  # skip_stage NAME WHY
  SUMMARY+=("$(printf '%-11s %7s %7s   skipped: %s' "$1" - - "$2")")
  echo "test.sh: == $1: skipped ($2)"
}

BACKGROUND_PID=""
BACKGROUND_DIR=$(mktemp -d /tmp/ropeserve-test-background.XXXXXX)
ASAN_BUILD_PID=""
cleanup() {
  local pid
  for pid in $BACKGROUND_PID $ASAN_BUILD_PID; do kill -- -"$pid" 2>/dev/null || true; done
  rm -rf "$BACKGROUND_DIR" "$TIMES_FILE"
}
trap cleanup EXIT

# CI has no GPU: a CUDA toolkit, when present, builds the plugin for one
# virtual architecture (the host tests run its host code; the device code is
# only compiled). Only for a new build tree, which keeps it from then on.
build_args=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && [ -z "${CUDAARCHS:-}" ]; then
  build_args+=(-DCMAKE_CUDA_ARCHITECTURES=75-virtual)
fi

run_stage layers bash -c './scripts/check_layers.sh && ./scripts/check_layers.sh --self-test'

if [ "$FAST" = 1 ]; then
  # Only what the fast tests run; no packages installed.
  run_stage build ./scripts/build.sh --target rope_tests_fast "${build_args[@]}"
  run_stage ctest-fast bash -c "cd '$BUILD_DIR' && ctest -L fast --output-on-failure -j$(nproc) --timeout 600"
  summary
  exit 0
fi

container_why=""
if [ "${ROPE_SKIP_CONTAINER_TEST:-0}" = 1 ]; then
  container_why="ROPE_SKIP_CONTAINER_TEST=1"
elif [ "$(id -u)" -ne 0 ]; then
  container_why="it needs root (podman, debootstrap)"
fi

run_stage setup ./scripts/setup.sh --build

# Beside the compile, which needs neither: the test-only packages (python3-torch
# and its dependencies, the largest download), then the container test's
# tools and base image. Network and disk, little CPU. Each step leaves its
# log and exit status in $BACKGROUND_DIR; its own process group, so that an
# early exit stops apt or debootstrap too.
setsid bash -c '
  dir=$1 prepare=$2
  ./scripts/setup.sh --test-only > "$dir/setup.log" 2>&1
  echo $? > "$dir/setup.status"
  if [ "$prepare" = 1 ]; then
    ./scripts/container_test.sh --prepare > "$dir/prepare.log" 2>&1
    echo $? > "$dir/prepare.status"
  fi' background "$BACKGROUND_DIR" "$([ -z "$container_why" ] && echo 1 || echo 0)" &
BACKGROUND_PID=$!

# wait_background STEP PID: waits (at most an hour) for a background step of
# the process PID, shows its log and returns its exit status.
wait_background() {
  local step=$1 pid=$2 waited=0
  while [ ! -f "$BACKGROUND_DIR/$step.status" ] && [ $waited -lt 3600 ]; do
    # Ended (or a zombie: nobody waits for it) without writing the status.
    if ! grep -qs '^State:[[:space:]]*[^Z]' "/proc/$pid/status" &&
       [ ! -f "$BACKGROUND_DIR/$step.status" ]; then
      break
    fi
    sleep 1
    waited=$((waited + 1))
  done
  sed "s/^/  ($step, in the background) /" "$BACKGROUND_DIR/$step.log" 2>/dev/null || true
  if [ ! -f "$BACKGROUND_DIR/$step.status" ]; then
    echo "test.sh: the background step $step did not finish" >&2
    return 1
  fi
  return "$(cat "$BACKGROUND_DIR/$step.status")"
}

run_stage build ./scripts/build.sh "${build_args[@]}"

# The ASan build at the lowest priority, in the CPU the next stages leave
# idle (tests waiting on servers and timers, the image's network steps); the
# asan stage waits for it and finishes what it did not.
if [ "${ROPE_SKIP_SANITIZE:-0}" != 1 ]; then
  setsid bash -c '
    nice -n 19 ./scripts/sanitize.sh --build-only > "$1/asan-build.log" 2>&1
    echo $? > "$1/asan-build.status"' background "$BACKGROUND_DIR" &
  ASAN_BUILD_PID=$!
fi

run_stage setup-test wait_background setup "$BACKGROUND_PID"
run_stage ctest bash -c "cd '$BUILD_DIR' && ctest --output-on-failure -j$(nproc) --timeout 600"
run_stage k8s ./scripts/k8s_check.sh

if [ -n "$container_why" ]; then
  skip_stage container "$container_why"
else
  container_stage() {
    # A failed preparation is done again, in the open, by the test itself.
    wait_background prepare "$BACKGROUND_PID" || echo "test.sh: the container preparation failed; the test repeats it"
    ./scripts/container_test.sh
  }
  run_stage container container_stage
fi

if [ "${ROPE_SKIP_SANITIZE:-0}" = 1 ]; then
  skip_stage asan "ROPE_SKIP_SANITIZE=1"
else
  asan_stage() {
    # A failed background build shows its log; the build below repeats it.
    wait_background asan-build "$ASAN_BUILD_PID" ||
      echo "test.sh: the background ASan build failed; building again"
    ./scripts/sanitize.sh
  }
  run_stage asan asan_stage
fi
if [ "${ROPE_SKIP_TSAN:-0}" = 1 ]; then
  skip_stage tsan "ROPE_SKIP_TSAN=1"
else
  run_stage tsan ./scripts/tsan.sh
fi
if [ "${ROPE_SKIP_FUZZ:-0}" = 1 ]; then
  skip_stage fuzz "ROPE_SKIP_FUZZ=1"
else
  # 60 CPU-seconds of fuzzing, spread over the cores (30 s on CI's two).
  run_stage fuzz env FUZZ_SECONDS="${FUZZ_SECONDS:-$(( (60 + $(nproc) - 1) / $(nproc) ))}" \
    ./scripts/fuzz.sh
fi
summary
