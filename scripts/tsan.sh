#!/usr/bin/env bash
# Builds the concurrency tests (the tests labelled tsan,
# cmake/RopeTestStages.cmake) with ThreadSanitizer (g++) in
# ${TSAN_BUILD_DIR:-build-tsan} and runs them; today:
#   rope_unit_cache_test        table cache: one build per key under concurrent misses
#   rope_unit_paged_table_test  paged tables: one build per block under overlapping calls
#   rope_unit_thread_pool_test  common/'s ThreadPool: ParallelFor from many callers
#   rope_unit_rotate_test       CPU backend: rows split across threads, concurrent calls
#   rope_unit_attention_test    CPU backend: attention split across threads
#   rope_service_sync_test      the service's CallGate, ByteBudget and WorkQueue
#
# Why Abseil is rebuilt: Debian's libabsl is not built with -fsanitize=thread,
# so absl::Mutex's Lock/Unlock run in uninstrumented code, TSan never sees the
# ordering they give, and every ABSL_GUARDED_BY member reads as a data race.
# The tests are compiled and linked against Debian's Abseil; then this script
# builds, from Debian's own Abseil source package (the installed version, same
# patches and options.h, same SONAMEs and inline namespace), with
# -fsanitize=thread, exactly the Abseil libraries the test binaries load (ldd
# says which: 30 of its 64 today) into ${TSAN_DEPS_DIR:-build-tsan-deps},
# and runs the tests with those first on LD_LIBRARY_PATH. The Abseil build
# tree is kept, so a later run builds only what it lacks. Fetching the source
# needs a deb-src entry: when `apt-cache showsrc` lacks the version, the
# script adds /etc/apt/sources.list.d/ropeserve-deb-src.sources (root or sudo).
#
# Not covered: the gRPC service tests. Loading this Abseil does make
# Debian's libgrpc take its absl::Mutex calls there (checked with
# LD_DEBUG=bindings), but gRPC core hands each call between threads through
# its own lock-free queues and atomics, compiled without TSan, so TSan still
# reports the call life cycle (a reactor's Finish vs. its OnDone, StartWrite
# vs. the write's completion, absl::Status payloads made in libgrpc) as races.
# Hiding them needs suppressions that would also hide races in our reactors,
# and an instrumented gRPC (about 840 files, some 10 min on 2 cores) does not
# fit the CI budget.
#
# A report aborts the test binary that hit it (halt_on_error=1). Suppressions
# (scripts/tsan.supp) cover only code that is not ours, each with its reason.
#
#   scripts/tsan.sh                               # the tsan label
#   TSAN_TESTS="rope_unit_cache_test" scripts/tsan.sh  # some test binaries
#   TSAN_TESTS=rope_service_rpc_test \
#     TSAN_OPTIONS=halt_on_error=0:ignore_noninstrumented_modules=1 \
#     scripts/tsan.sh                             # see what gRPC's hand-offs give
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
DEPS_DIR=${TSAN_DEPS_DIR:-build-tsan-deps}
CXX=${CXX:-g++}
JOBS=$(nproc)
mkdir -p "$DEPS_DIR"
DEPS_DIR=$(cd "$DEPS_DIR" && pwd)

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

# The Abseil the project builds against: Debian's source package and version.
ABSL_SRC_PKG=$(dpkg-query -W -f='${source:Package}' libabsl-dev)
ABSL_VERSION=$(dpkg-query -W -f='${source:Version}' libabsl-dev)
ABSL_FLAGS="-O2 -g1 -fsanitize=thread -fno-omit-frame-pointer"
ABSL_BUILD=$DEPS_DIR/absl-build
ABSL_LIBDIR=$DEPS_DIR/absl-tsan-$ABSL_VERSION-lib
ABSL_STAMP="$ABSL_SRC_PKG $ABSL_VERSION $($CXX --version | head -n1) $ABSL_FLAGS"

have_abseil_source() {
  apt-cache showsrc "$ABSL_SRC_PKG" 2>/dev/null | grep -qxF "Version: $ABSL_VERSION"
}

# deb-src twins of the machine's deb sources (deb822 format, Debian 12's
# default), or Debian's own mirrors when there is no such file.
add_deb_src() {
  local list=/etc/apt/sources.list.d/ropeserve-deb-src.sources
  if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
    echo "tsan: Abseil's source package needs a deb-src entry in $list: run as root" >&2
    exit 1
  fi
  echo "tsan: adding $list"
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | $SUDO tee "$list" >/dev/null
  else
    $SUDO tee "$list" >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  fi
  $SUDO apt-get update -qq
}

# fetch_abseil: Debian's Abseil source, unpacked under $DEPS_DIR/src.
ABSL_SRC=$DEPS_DIR/src/abseil-$ABSL_VERSION
fetch_abseil() {
  have_abseil_source || add_deb_src
  have_abseil_source || { echo "tsan: no source for $ABSL_SRC_PKG $ABSL_VERSION" >&2; exit 1; }
  rm -rf "$DEPS_DIR/src" && mkdir -p "$DEPS_DIR/src"
  # apt checks the files against the signed Sources index; dpkg-source
  # warns that it cannot check the .dsc's own signature (no keyring).
  (cd "$DEPS_DIR/src" &&
    apt-get source -qq --download-only "$ABSL_SRC_PKG=$ABSL_VERSION" &&
    dpkg-source -q -x ./*.dsc "$ABSL_SRC")
}

# build_abseil LIBRARY...: builds those Abseil libraries (libabsl_*.so names)
# and their dependencies with -fsanitize=thread and copies them into
# $ABSL_LIBDIR.
build_abseil() {
  local targets=() lib start=$SECONDS
  # Abseil names each library target without the absl_ of its file name.
  for lib in "$@"; do targets+=(--target "${lib#libabsl_}"); done
  [ -f "$ABSL_SRC/CMakeLists.txt" ] || fetch_abseil
  echo "tsan: building $* of $ABSL_SRC_PKG $ABSL_VERSION with -fsanitize=thread"
  # Shared libraries with Debian's SONAMEs: Debian's libgrpc, loaded into the
  # same process, then binds to these too and there is one Abseil.
  # Abseil's own warnings (-Wtsan on its seqlock fences, among others) go to
  # the log, shown only if the build fails.
  local log=$DEPS_DIR/absl-build.log
  if ! { cmake -S "$ABSL_SRC" -B "$ABSL_BUILD" \
           -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_CXX_STANDARD=17 \
           -DCMAKE_CXX_FLAGS="$ABSL_FLAGS" -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
           -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF &&
         cmake --build "$ABSL_BUILD" -j"$JOBS" "${targets[@]}"; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "tsan: the Abseil build failed; full log in $log" >&2
    exit 1
  fi
  echo "$ABSL_STAMP" >"$ABSL_BUILD/rope-tsan-stamp"
  mkdir -p "$ABSL_LIBDIR"
  find "$ABSL_BUILD" -name 'libabsl_*.so*' -exec cp -P -t "$ABSL_LIBDIR" {} +
  echo "tsan: Abseil libraries built in $((SECONDS - start)) s"
}

# The tests, against Debian's Abseil (the same headers); run against the
# instrumented libraries below.
CXX=$CXX cmake -S . -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DROPE_SANITIZE=thread \
  -DROPE_ENABLE_CUDA=OFF \
  -DROPE_BUILD_BENCHMARKS=OFF >/dev/null
# The GoogleTest binaries labelled tsan, each run whole below.
TESTS=${TSAN_TESTS:-$(xargs -r -n1 basename < "$BUILD_DIR/tests/stage_tsan_binaries.txt" | paste -sd' ')}
[ -n "$TESTS" ] || { echo "tsan: no test binary labelled tsan in $BUILD_DIR" >&2; exit 1; }
# shellcheck disable=SC2086  # TESTS is a list of targets
cmake --build "$BUILD_DIR" -j"$JOBS" --target $TESTS

# Libraries built with other flags or another compiler are built again.
if [ "$(cat "$ABSL_BUILD/rope-tsan-stamp" 2>/dev/null)" != "$ABSL_STAMP" ]; then
  rm -rf "$ABSL_BUILD" "$ABSL_LIBDIR"
fi
export LD_LIBRARY_PATH=$ABSL_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# outside_abseil BINARY: the Abseil libraries it would load from elsewhere.
outside_abseil() {
  ldd "$1" | awk '$1 ~ /^libabsl_/ && index($3, dir "/") != 1 { sub(/\.so.*/, "", $1); print $1 }' \
    dir="$ABSL_LIBDIR" | sort -u
}
missing=()
for t in $TESTS; do
  mapfile -t -O "${#missing[@]}" missing < <(outside_abseil "$BUILD_DIR/bin/$t")
done
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  build_abseil "${missing[@]}"
fi

# A caller's TSAN_OPTIONS come last and win.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/scripts/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
failed=()
for t in $TESTS; do
  bin=$BUILD_DIR/bin/$t
  # An uninstrumented libabsl would turn every guarded member into a report.
  outside=$(outside_abseil "$bin")
  if [ -n "$outside" ]; then
    echo "tsan: $t loads Abseil from outside $ABSL_LIBDIR:" $outside >&2
    exit 1
  fi
  echo "tsan: $t"
  if ! "$bin" --gtest_brief=1; then failed+=("$t"); fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "tsan: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "tsan: all passed (${TESTS// /, })"
