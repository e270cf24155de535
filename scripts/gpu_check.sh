#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one prepared run: the CUDA backend
# tests (the tiled attention kernels over every mask, transform and result
# against the CPU backend's tiled pass included, and an OUTPUT + LSE call
# by CUDA IPC references in device memory), the GPU benchmark (cuda_bench),
# and the Rotate/Echo RPC benchmark on --backend=cuda.
#
# The lent GPU machine has CUDA, PyTorch (CUDA 13 wheels) and no package
# registry: configuring there stops at find_package(absl). So the binaries
# are built here, packed with the shared libraries the GPU machine lacks, and
# carried there:
#
#   1. here:   scripts/gpu_check.sh bundle
#   2. there, with the device tool:
#        run(command="scripts/gpu_check.sh run",
#            carry=["build-gpu/gpu_bundle.tar.gz"], timeout_s=420)
#
# Modes:
#   bundle       build the needed targets (all cores) in $BUILD_DIR, then pack
#   pack         pack an existing build of those targets without building
#                (CI's dry run packs its own build)
#   run          (the default) unpack $BUNDLE and run the checks. Without the
#                bundle it fails at once (exit 2), printing the two steps above.
#   local        build here and run here: a machine with a GPU and every build
#                dependency (not the lent GPU machine)
#   find-cublas  say where libcublas.so.13 is (run looks for it first): the
#                CUDA 13 wheels' nvidia/cu13/lib under each nvidia.__path__
#                entry, then the toolkit ($CUDA_HOME), then a search under
#                $CUBLAS_SEARCH_ROOTS; exit 1 when none has it
#
# Results (logs, test XML, benchmark JSON and tables; flat names) go to $OUT
# and nowhere else: on the GPU machine only $OUT comes back. Copy the tables
# into bench/results/ here, naming the device.
#
# Without a GPU, run and local are a dry run: everything runs, the device
# tests skip (saying why), the benchmark prints "skipped" and
# ropeserve --backend=cuda refuses to start. The ctest test gpu_check_test
# does that in CI, and checks the bundle's contents and size.
#
# Environment: BUILD_DIR (default build-gpu), BUNDLE (default
# $BUILD_DIR/gpu_bundle.tar.gz), OUT (default $BUILD_DIR/out), CUDA_ARCHS
# (default 90-real, the H100/H200 only, for a new build directory; an
# existing one keeps its architectures), SECONDS_PER_CASE (service
# benchmark, default 2), BUDGET_SECONDS (default 360: every step's timeout is
# cut to what is left of it), CUDA_HOME (default /usr/local/cuda),
# CUBLAS_SEARCH_ROOTS (default "/usr /opt /home /root").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
MODE=${1:-run}
BUILD_DIR=${BUILD_DIR:-build-gpu}
BUNDLE=${BUNDLE:-$BUILD_DIR/gpu_bundle.tar.gz}
OUT=${OUT:-$BUILD_DIR/out}
# What the device run needs, and the files those targets put in bin/ (the
# plugin is librope_cuda.so, found beside ropeserve). The kernel-body host
# tests need no GPU: CI runs them.
TARGETS=(rope_cuda_backend_test rope_cuda_loader_test cuda_bench ropeserve service_bench
         rope_cuda_plugin)
FILES=(rope_cuda_backend_test rope_cuda_loader_test cuda_bench ropeserve service_bench
       librope_cuda.so)
START=$(date +%s)
DEADLINE=$((START + ${BUDGET_SECONDS:-360}))

case "$MODE" in
  bundle | pack | run | local | find-cublas) ;;
  *)
    echo "usage: $0 [run|bundle|pack|local|find-cublas] (see the comment at its top)" >&2
    exit 2
    ;;
esac

mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: >"$LOG"

say() { echo "[gpu_check +$(($(date +%s) - START))s] $*" | tee -a "$LOG"; }

# Seconds a step may take: its own cap, or what is left of the budget.
cap() {
  local left=$((DEADLINE - $(date +%s)))
  [ "$left" -lt 5 ] && left=5
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

build() {
  local archs=()
  # A new build directory gets CUDA_ARCHS; an existing one keeps its own
  # unless CUDA_ARCHS is given (so that packing CI's build rebuilds nothing).
  if [ -n "${CUDA_ARCHS:-}" ] || [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    archs=(-DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90-real}")
  fi
  # Not cut by BUDGET_SECONDS (which is the device run's).
  say "configure $BUILD_DIR ${archs[*]}"
  timeout 600 cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DROPE_ENABLE_CUDA=ON \
    "${archs[@]}" >>"$LOG" 2>&1 || return 1
  say "build ${TARGETS[*]} with $(nproc) jobs"
  timeout 7200 cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${TARGETS[@]}" >>"$LOG" 2>&1 \
    || return 1
  BIN="$ROOT/$BUILD_DIR/bin"
  say "build done"
}

# Packs the binaries and the shared libraries they need that a CUDA machine
# may lack: everything ldd resolves except the C/C++ runtime (the newer one
# there serves) and the driver. cuBLAS is dlopen'ed, so ldd does not list
# it: far too large to carry, the GPU machine's is used (find_cublas).
pack() {
  local bin=${BIN:-$BUILD_DIR/bin} t
  for t in "${FILES[@]}"; do
    if [ ! -f "$bin/$t" ]; then
      say "no $bin/$t: build it first (scripts/gpu_check.sh bundle builds, then packs)"
      return 1
    fi
  done
  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/rope_gpu_pack.XXXXXX") || return 1
  mkdir -p "$dir/bin" "$dir/lib"
  for t in "${FILES[@]}"; do cp "$bin/$t" "$dir/bin/"; done
  for t in "${FILES[@]}"; do
    ldd "$bin/$t" | awk '/=> \//{print $3}'
  done | sort -u \
    | grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/libcuda\.so' \
    | while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  mkdir -p "$(dirname "$BUNDLE")"
  tar -C "$dir" -czf "$BUNDLE" bin lib
  local status=$?
  rm -rf "$dir"
  [ "$status" -eq 0 ] || return 1
  say "bundle: $BUNDLE ($(du -h "$BUNDLE" | cut -f1); $(tar -tzf "$BUNDLE" | grep -c '^lib/.') libraries)"
}

# The invocation that works, for when `run` finds no bundle.
no_bundle() {
  {
    echo "gpu_check: no bundle at $BUNDLE."
    echo "The GPU machine cannot build ropeserve (no package registry: CMake stops at"
    echo "find_package(absl)). Build the bundle here, then carry it there, in two steps:"
    echo "  1. here:   scripts/gpu_check.sh bundle"
    echo "  2. with the device tool:"
    echo "     run(command=\"scripts/gpu_check.sh run\", carry=[\"$BUNDLE\"], timeout_s=420)"
  } | tee -a "$LOG" >&2
  exit 2
}

UNPACKED=""
unbundle() {
  UNPACKED=$(mktemp -d "${TMPDIR:-/tmp}/rope_gpu_bundle.XXXXXX") || return 1
  trap 'rm -rf "$UNPACKED"' EXIT
  tar -C "$UNPACKED" -xzf "$BUNDLE" || return 1
  BIN="$UNPACKED/bin"
  export LD_LIBRARY_PATH="$UNPACKED/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "running from the carried bundle $BUNDLE"
}

# Prints the directory holding libcublas.so.13 and how it was found
# ("wheel", "toolkit" or "search"), tab-separated; nothing when none does.
locate_cublas() {
  local d
  # Each entry of nvidia.__path__ (a namespace package: one per
  # site-packages that has nvidia/), as the CUDA 13 wheels lay them out.
  while IFS= read -r d; do
    [ -n "$d" ] && [ -e "$d/libcublas.so.13" ] && { printf '%s\twheel\n' "$d"; return; }
  done < <(python3 -c '
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
for p in getattr(nvidia, "__path__", []):
    print(os.path.join(p, "cu13", "lib"))
' 2>/dev/null)
  local home=${CUDA_HOME:-/usr/local/cuda}
  for d in "$home/lib64" "$home/targets/x86_64-linux/lib" "$home/lib"; do
    [ -e "$d/libcublas.so.13" ] && { printf '%s\ttoolkit\n' "$d"; return; }
  done
  local found
  # shellcheck disable=SC2086  # a list of directories
  found=$(timeout 60 find ${CUBLAS_SEARCH_ROOTS:-/usr /opt /home /root} -name libcublas.so.13 \
            -print -quit 2>/dev/null)
  [ -n "$found" ] && printf '%s\tsearch\n' "$(dirname "$found")"
}

# Puts libcublas.so.13's directory on LD_LIBRARY_PATH (after the bundle's
# libraries: the plugin dlopens it by name) and says where it came from.
find_cublas() {
  local where dir how
  where=$(locate_cublas)
  if [ -z "$where" ]; then
    say "libcublas.so.13 not found (no nvidia/cu13/lib under nvidia.__path__, none in" \
        "${CUDA_HOME:-/usr/local/cuda}, none under ${CUBLAS_SEARCH_ROOTS:-/usr /opt /home /root});" \
        "relying on the loader's defaults"
    return 1
  fi
  dir=${where%%$'\t'*}
  how=${where##*$'\t'}
  case "$how" in
    wheel) say "libcublas.so.13 from the CUDA 13 wheel (nvidia.__path__): $dir" ;;
    toolkit) say "libcublas.so.13 from the CUDA toolkit: $dir" ;;
    search) say "libcublas.so.13 found by searching: $dir" ;;
  esac
  if [ -n "$UNPACKED" ]; then
    export LD_LIBRARY_PATH="$UNPACKED/lib:$dir${LD_LIBRARY_PATH#"$UNPACKED/lib"}"
  else
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
}

run_checks() {
  say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  find_cublas
  say "plugin loader test"
  timeout "$(cap 60)" "$BIN/rope_cuda_loader_test" >>"$LOG" 2>&1
  say "plugin loader test: exit $?"
  say "CUDA backend tests, CUDA IPC shared memory included (device tests skip without a GPU)"
  timeout "$(cap 180)" "$BIN/rope_cuda_backend_test" --gtest_output=xml:"$OUT/cuda_backend_test.xml" \
    >"$OUT/cuda_backend_test.log" 2>&1
  local rc=$?
  say "CUDA backend tests: exit $rc ($(grep -c '^\[  SKIPPED \]' "$OUT/cuda_backend_test.log") skip lines)"
  tail -n 5 "$OUT/cuda_backend_test.log" | tee -a "$LOG"
  say "tiled attention on the device (kernels over the grid; OUTPUT + LSE by device reference):"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] .*(TiledAttentionMatchesCpuBackendOverTheGrid|RegisteredByHandleARegionServesRotateByReferenceOnTheDevice)' \
    "$OUT/cuda_backend_test.log" | tee -a "$LOG"

  say "GPU benchmark"
  timeout "$(cap 120)" "$BIN/cuda_bench" --out="$OUT/cuda_bench.json" --md="$OUT/cuda_bench.md" \
    2>&1 | tee -a "$LOG"

  say "Rotate vs Echo RPC on the CUDA backend"
  local slog
  slog=$(mktemp)
  "$BIN/ropeserve" --listen=127.0.0.1:0 --backend=cuda --enable_echo >"$slog" 2>&1 &
  local pid=$!
  local target=""
  for _ in $(seq 1 300); do
    target=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$slog" | head -n1)
    [ -n "$target" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$slog" >>"$LOG"
  if [ -n "$target" ]; then
    timeout "$(cap 90)" "$BIN/service_bench" --target="$target" --out="$OUT/service_bench_cuda.json" \
      --seconds_per_case="${SECONDS_PER_CASE:-2}" >>"$LOG" 2>&1
    python3 bench/summarize_service_bench.py "$OUT/service_bench_cuda.json" 2>>"$LOG" \
      | sed 's/--backend=cpu/--backend=cuda/' >"$OUT/service_bench_cuda.md"
    cat "$OUT/service_bench_cuda.md" >>"$LOG"
  else
    say "ropeserve --backend=cuda did not start (expected without a GPU)"
  fi
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -f "$slog"
  say "done; results in $OUT: $(cd "$OUT" && echo *)"
  return "$rc"
}

case "$MODE" in
  run)
    [ -f "$BUNDLE" ] || no_bundle
    unbundle || { say "cannot unpack $BUNDLE"; exit 1; }
    run_checks
    ;;
  bundle)
    build || { say "build failed (see $LOG)"; exit 1; }
    pack || exit 1
    ;;
  pack)
    pack || exit 1
    ;;
  local)
    build || { say "build failed (see $LOG)"; exit 1; }
    run_checks
    ;;
  find-cublas)
    find_cublas
    ;;
esac
