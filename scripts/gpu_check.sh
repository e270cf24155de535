#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one prepared run (< 8 minutes on a
# 16-core H200 machine): build, GPU tests, GPU benchmark, Rotate/Echo RPC
# benchmark on the CUDA backend; logs and results go to $OUT (8 files at
# most, flat names) and bench/results/.
#
#   scripts/gpu_check.sh            build here (all cores, needed targets only), then run
#   scripts/gpu_check.sh bundle     build here and pack binaries + their non-system shared
#                                   libraries into $BUILD_DIR/gpu_bundle.tar.gz (for a GPU
#                                   machine that has CUDA but not gRPC/Abseil/OpenBLAS)
#   scripts/gpu_check.sh run        run from $BUILD_DIR/gpu_bundle.tar.gz if present, else
#                                   build here first
#
# On a machine without a GPU the same commands are a dry run: everything
# builds and runs, the device tests skip (saying why), the benchmark prints
# "skipped" and ropeserve --backend=cuda refuses to start.
#
# Environment: BUILD_DIR (default build-gpu), OUT (default $BUILD_DIR/out),
# CUDA_ARCHS (default 90-real: the H100/H200 only, for a quick build),
# SECONDS_PER_CASE (service benchmark, default 2), BUDGET_SECONDS (default
# 450: every step's timeout is cut to what is left of it).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODE=${1:-all}
BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT=${OUT:-$BUILD_DIR/out}
CUDA_ARCHS=${CUDA_ARCHS:-90-real}
TARGETS=(rope_cuda_backend_test rope_cuda_kernel_body_test rope_cuda_loader_test cuda_bench ropeserve
         service_bench rope_cuda_plugin)
# What the targets put in bin/ (the plugin is librope_cuda.so, found beside ropeserve).
FILES=(rope_cuda_backend_test rope_cuda_kernel_body_test rope_cuda_loader_test cuda_bench ropeserve
       service_bench librope_cuda.so)
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: >"$LOG"
START=$(date +%s)
DEADLINE=$((START + ${BUDGET_SECONDS:-450}))  # the whole run stays under 8 minutes

say() { echo "[gpu_check +$(($(date +%s) - START))s] $*" | tee -a "$LOG"; }

# Seconds a step may take: its own cap, or what is left of the budget.
cap() {
  local left=$((DEADLINE - $(date +%s)))
  [ "$left" -lt 5 ] && left=5
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

build() {
  say "configure $BUILD_DIR (CUDA architectures $CUDA_ARCHS)"
  timeout "$(cap 120)" cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DROPE_ENABLE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" >>"$LOG" 2>&1 || return 1
  say "build ${TARGETS[*]} with $(nproc) jobs"
  timeout "$(cap 360)" cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${TARGETS[@]}" >>"$LOG" 2>&1 \
    || return 1
  BIN="$ROOT/$BUILD_DIR/bin"
  say "build done"
}

# Shared libraries a binary needs that a CUDA machine may lack: everything
# ldd resolves except the C/C++ runtime (the newer one there serves) and the
# driver (cuBLAS is dlopen'ed, so ldd does not list it: far too large to
# carry, the GPU machine's is used).
bundle() {
  local dir="$BUILD_DIR/gpu_bundle"
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib"
  for t in "${FILES[@]}"; do cp "$BIN/$t" "$dir/bin/"; done
  for t in "${FILES[@]}"; do
    ldd "$BIN/$t" | awk '/=> \//{print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/libcuda\.so' \
    | while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  tar -C "$dir" -czf "$BUILD_DIR/gpu_bundle.tar.gz" bin lib
  say "bundle: $BUILD_DIR/gpu_bundle.tar.gz ($(du -h "$BUILD_DIR/gpu_bundle.tar.gz" | cut -f1))"
}

unbundle() {
  local dir=/tmp/rope_gpu_bundle
  rm -rf "$dir" && mkdir -p "$dir"
  tar -C "$dir" -xzf "$BUILD_DIR/gpu_bundle.tar.gz" || return 1
  BIN="$dir/bin"
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "running from the carried bundle"
}

# Where this machine keeps libcublas.so.13 (toolkit, or PyTorch's wheels).
find_cublas() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib \
           $(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null); do
    if [ -e "$d/libcublas.so.13" ]; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      say "libcublas from $d"
      return 0
    fi
  done
  say "libcublas.so.13 not found in the usual places; relying on the loader's defaults"
}

run_checks() {
  say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  find_cublas
  say "kernel-body host tests"
  timeout "$(cap 60)" "$BIN/rope_cuda_kernel_body_test" --gtest_brief=1 >"$OUT/kernel_body_test.log" 2>&1
  say "kernel-body host tests: exit $?"
  say "plugin loader test"
  timeout "$(cap 60)" "$BIN/rope_cuda_loader_test" >>"$LOG" 2>&1
  say "plugin loader test: exit $?"
  say "CUDA backend tests (device tests skip without a GPU)"
  timeout "$(cap 180)" "$BIN/rope_cuda_backend_test" --gtest_output=xml:"$OUT/cuda_backend_test.xml" \
    >"$OUT/cuda_backend_test.log" 2>&1
  local rc=$?
  say "CUDA backend tests: exit $rc ($(grep -c '^\[  SKIPPED \]' "$OUT/cuda_backend_test.log") skip lines)"
  tail -n 5 "$OUT/cuda_backend_test.log" | tee -a "$LOG"

  say "GPU benchmark"
  timeout "$(cap 120)" "$BIN/cuda_bench" --out="$OUT/cuda_bench.json" --md="$OUT/cuda_bench.md" \
    2>&1 | tee -a "$LOG"

  local device_tag
  device_tag=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '_' )
  if [ -n "$device_tag" ] && [ -s "$OUT/cuda_bench.md" ]; then
    mkdir -p bench/results
    cp "$OUT/cuda_bench.md" "bench/results/cuda_bench_$(date -u +%Y-%m-%d)_${device_tag}.md"
  fi

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
  say "done; results in $OUT: $(ls "$OUT" | tr '\n' ' ')"
  return "$rc"
}

case "$MODE" in
  all)
    build || { say "build failed (see $LOG)"; exit 1; }
    run_checks
    ;;
  bundle)
    build || { say "build failed (see $LOG)"; exit 1; }
    bundle
    ;;
  run)
    if [ -f "$BUILD_DIR/gpu_bundle.tar.gz" ]; then
      unbundle || exit 1
    else
      build || { say "no bundle and the build failed (see $LOG)"; exit 1; }
    fi
    run_checks
    ;;
  *)
    echo "usage: $0 [all|bundle|run]" >&2
    exit 2
    ;;
esac
