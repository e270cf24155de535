#!/usr/bin/env bash
# Builds the CPU-only ropeserve image from the top-level Dockerfile with podman
# and tests it: the container serves health, info and rotate to the host's
# ropectl on 127.0.0.1 ports, runs as a non-root user on a read-only root file
# system with every capability dropped, passes its own HEALTHCHECK, and exits
# 0 on SIGTERM after draining.
#
# Where the image's binaries come from (ROPE_CONTAINER_BUILD):
#   prebuilt  the Release binaries of $BUILD_DIR (ropeserve, ropectl,
#             ropeload), stripped, with the packages their libraries come
#             from (deploy/image/runtime-packages.sh), through the
#             Dockerfile's `prebuilt` stage: the runtime stage, which makes
#             the image this test runs, is the same and nothing is compiled
#             twice. Only on a Debian 12 host (the image's release) with a
#             Release build without sanitizers. The Dockerfile's own CMake
#             configuration (BUILD_TESTING=OFF, no benchmarks) is still
#             configured, so that a product target needing a test or
#             benchmark target fails here as it would in the build stage.
#   source    the Dockerfile's build stage: setup.sh --build in the image,
#             then CMake compiles ropeserve and the clients inside (several
#             minutes on 2 cores). Run it when the Dockerfile, .dockerignore,
#             scripts/setup.sh or deploy/image change.
#   auto      (the default) prebuilt where it applies, source otherwise.
#
# No registry is reachable here, so the Debian 12 base image is made locally
# with debootstrap (cached under $ROPE_BASE_CACHE, rebuilt only when missing)
# and imported as localhost/debian:bookworm. The runtime stage (and the build
# stage) still need Debian's package mirror.
#
#   scripts/container_test.sh            build and test the image
#   scripts/container_test.sh --prepare  only install the tools and make the
#                                        base image (network and disk, little
#                                        CPU: scripts/test.sh runs it beside
#                                        the compile)
#
# Needs root (CI runs as root on a fresh Debian 12 machine); installs podman,
# buildah, runc and debootstrap when missing. Every wait is bounded.
#
# Environment:
#   BUILD_DIR            host build tree holding bin/ropectl (default: build)
#   ROPE_CONTAINER_BUILD auto, prebuilt or source (above; default auto)
#   ROPE_BASE_CACHE      where the debootstrap tarball is kept (/var/tmp/ropeserve-base)
#   ROPE_IMAGE           tag of the image built (localhost/ropeserve:cpu)
#   ROPE_DEBIAN_MIRROR   Debian mirror for debootstrap (http://deb.debian.org/debian)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
BASE_CACHE=${ROPE_BASE_CACHE:-/var/tmp/ropeserve-base}
BASE_IMAGE=localhost/debian:bookworm
IMAGE=${ROPE_IMAGE:-localhost/ropeserve:cpu}
MIRROR=${ROPE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
MODE=${ROPE_CONTAINER_BUILD:-auto}
CONTAINER=ropeserve-container-test-$$
PREPARE_ONLY=0
if [ "${1:-}" = "--prepare" ]; then PREPARE_ONLY=1; fi

START=$(date +%s)
phase() {  # names the next step, with the seconds since the start
  echo "container_test [+$(( $(date +%s) - START ))s] $*"
}
fail() {
  echo "container_test: FAIL: $*" >&2
  exit 1
}

if [ "$(id -u)" -ne 0 ]; then
  fail "needs root (podman build/run as root, debootstrap, apt-get)"
fi
case "$MODE" in
  auto|prebuilt|source) ;;
  *) fail "ROPE_CONTAINER_BUILD=$MODE: want auto, prebuilt or source" ;;
esac

# --- tools -----------------------------------------------------------------
# Only this script needs them, so they are not in scripts/setup.sh.
TOOLS=(podman buildah runc debootstrap)
missing=()
for p in "${TOOLS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  phase "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

WORK=$(mktemp -d /tmp/ropeserve-container-test.XXXXXX)
cleanup() {
  timeout 60 podman rm -f --time 5 "$CONTAINER" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# podman run needs runc and explicit ulimits on these machines.
cat > "$WORK/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF=$WORK/containers.conf

# --- local Debian 12 base image ----------------------------------------------
BASE_TAR=$BASE_CACHE/debian-bookworm-minbase.tar
if ! timeout 60 podman image exists "$BASE_IMAGE"; then
  if [ ! -s "$BASE_TAR" ]; then
    phase "debootstrap --variant=minbase bookworm (cached in $BASE_CACHE)"
    mkdir -p "$BASE_CACHE"
    rootfs=$WORK/rootfs
    timeout 900 debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" \
      > "$WORK/debootstrap.log" 2>&1 || { tail -n 20 "$WORK/debootstrap.log" >&2; fail "debootstrap"; }
    # The same suites as the host: point releases and security updates.
    rm -f "$rootfs/etc/apt/sources.list"
    cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
    # Written under a temporary name, so an interrupted run leaves no
    # truncated cache behind.
    tar -C "$rootfs" --numeric-owner -cf "$BASE_TAR.tmp" .
    mv "$BASE_TAR.tmp" "$BASE_TAR"
    rm -rf "$rootfs"
  fi
  phase "importing $BASE_TAR as $BASE_IMAGE"
  timeout 300 podman import --quiet "$BASE_TAR" "$BASE_IMAGE" >/dev/null
fi
if [ "$PREPARE_ONLY" = 1 ]; then
  echo "container_test: prepared (tools and $BASE_IMAGE) in $(( $(date +%s) - START )) s"
  exit 0
fi

# --- the host's ropectl ----------------------------------------------------
ROPECTL=$ROOT/$BUILD_DIR/bin/ropectl
if [ ! -x "$ROPECTL" ]; then
  phase "building ropectl into $BUILD_DIR"
  ./scripts/setup.sh
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target ropectl
fi

# --- where the image's binaries come from ------------------------------------
# prebuilt_refusal: why $BUILD_DIR's binaries cannot go into the image as
# they are (nothing when they can).
prebuilt_refusal() {
  local id version cache=$BUILD_DIR/CMakeCache.txt
  id=$(. /etc/os-release && echo "${ID:-}")
  version=$(. /etc/os-release && echo "${VERSION_ID:-}")
  if [ "$id" != debian ] || [ "$version" != 12 ]; then
    echo "the host is $id $version, not the image's Debian 12"
  elif [ ! -f "$cache" ] || [ ! -x "$BUILD_DIR/bin/ropeserve" ]; then
    echo "$BUILD_DIR holds no built ropeserve"
  elif ! grep -qx 'CMAKE_BUILD_TYPE:STRING=Release' "$cache"; then
    echo "$BUILD_DIR is not a Release build"
  elif ! grep -qx 'ROPE_SANITIZE:STRING=' "$cache"; then
    echo "$BUILD_DIR is built with sanitizers"
  fi
}
if [ "$MODE" != source ]; then
  refusal=$(prebuilt_refusal)
  if [ -z "$refusal" ]; then
    MODE=prebuilt
  elif [ "$MODE" = prebuilt ]; then
    fail "ROPE_CONTAINER_BUILD=prebuilt: $refusal"
  else
    echo "container_test: the image compiles its own binaries: $refusal"
    MODE=source
  fi
fi

# --- build -------------------------------------------------------------------
# build CONTEXT ARGS...: podman build of the Dockerfile on a Debian 12 base.
# --format docker keeps HEALTHCHECK (the OCI image format has no such field).
build() {
  local context=$1
  shift
  timeout 2400 podman build --isolation=chroot --format docker --pull=never \
    --build-arg BUILD_IMAGE="$BASE_IMAGE" --build-arg RUNTIME_IMAGE="$BASE_IMAGE" \
    -f "$ROOT/Dockerfile" "$@" "$context" >> "$WORK/build.log" 2>&1
}
if [ "$MODE" = prebuilt ]; then
  phase "podman build $IMAGE from $BUILD_DIR's binaries (BINARIES=prebuilt;" \
    "ROPE_CONTAINER_BUILD=source compiles them in the image)"
  timeout 300 cmake -S . -B "$WORK/image-config" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_TESTING=OFF -DROPE_BUILD_BENCHMARKS=OFF > "$WORK/image-config.log" 2>&1 \
    || { tail -n 30 "$WORK/image-config.log" >&2; fail "the Dockerfile's CMake configuration"; }
  # The context holds only what the prebuilt path copies: image-bin/ and
  # the front proxy's configuration (the runtime stage's own COPY).
  context=$WORK/context
  mkdir -p "$context/image-bin/bin" "$context/deploy/proxy"
  cp deploy/proxy/haproxy.cfg "$context/deploy/proxy/haproxy.cfg"
  for b in ropeserve ropectl ropeload; do
    if [ -x "$BUILD_DIR/bin/$b" ]; then
      strip --strip-unneeded -o "$context/image-bin/bin/$b" "$BUILD_DIR/bin/$b"
    fi
  done
  deploy/image/runtime-packages.sh "$context"/image-bin/bin/* \
    > "$context/image-bin/runtime-packages.txt" || fail "deploy/image/runtime-packages.sh"
  echo "runtime packages:" $(cat "$context/image-bin/runtime-packages.txt")
  if ! build "$context" --build-arg BINARIES=prebuilt -t "$IMAGE"; then
    tail -n 40 "$WORK/build.log" >&2
    fail "podman build"
  fi
else
  phase "podman build $IMAGE (CPU-only: BUILD_IMAGE=RUNTIME_IMAGE=$BASE_IMAGE," \
    "binaries compiled in the image)"
  # The build stage is tagged too ($IMAGE-build), so that it stays cached for
  # the next run while older, now untagged, layers of this Dockerfile (label
  # ropeserve.stage) are pruned: each source change would otherwise leave
  # another ~1.5 GB build stage behind.
  if ! build . --build-arg BINARIES=build --target build -t "$IMAGE-build" ||
     ! build . --build-arg BINARIES=build -t "$IMAGE"; then
    tail -n 40 "$WORK/build.log" >&2
    fail "podman build"
  fi
  grep "^runtime packages:" "$WORK/build.log" || true
fi
timeout 300 podman image prune -f --filter label=ropeserve.stage > /dev/null 2>&1 || true
echo "container_test: image size $(podman image inspect --format '{{.Size}}' "$IMAGE") bytes;" \
  "binaries: $(timeout 120 podman run --rm --entrypoint ls "$IMAGE" /usr/local/bin 2>/dev/null | tr '\n' ' ')"

# --- run ---------------------------------------------------------------------
phase "podman run (127.0.0.1 ports, read-only root, no capabilities)"
# Host ports are chosen by podman ("127.0.0.1::PORT") and read back.
# --health-interval=disable: no systemd timer for the image's HEALTHCHECK
# (there is no systemd here); it is run once below instead.
timeout 120 podman run -d --name "$CONTAINER" --health-interval=disable \
  --read-only --cap-drop=ALL --security-opt=no-new-privileges \
  -p 127.0.0.1::50051 -p 127.0.0.1::9090 \
  "$IMAGE" --backend=cpu --cpu_threads=1 --work_threads=2 --shutdown_grace_period=5s \
  > /dev/null 2> "$WORK/run.err" || { cat "$WORK/run.err" >&2; fail "podman run"; }
host_port() {
  timeout 30 podman port "$CONTAINER" "$1" | head -n 1 | sed 's/.*://'
}
GRPC_PORT=$(host_port 50051/tcp)
METRICS_PORT=$(host_port 9090/tcp)
TARGET=127.0.0.1:$GRPC_PORT
echo "container_test: gRPC on $TARGET, metrics on 127.0.0.1:$METRICS_PORT"

# Health: SERVING within 60 s (40 tries, each bounded by its deadline).
serving=0
for _ in $(seq 1 40); do
  if "$ROPECTL" health --target="$TARGET" --deadline=2s > "$WORK/health.txt" 2>&1; then
    serving=1
    break
  fi
  if [ "$(podman inspect --format '{{.State.Running}}' "$CONTAINER")" != "true" ]; then
    podman logs "$CONTAINER" >&2 || true
    fail "the container exited before serving"
  fi
  sleep 1
done
[ "$serving" -eq 1 ] || { cat "$WORK/health.txt" >&2; podman logs "$CONTAINER" >&2; fail "health never SERVING"; }
grep -q SERVING "$WORK/health.txt" || fail "ropectl health printed $(cat "$WORK/health.txt")"
echo "container_test: health: $(cat "$WORK/health.txt")"

phase "calling the container from the host"
"$ROPECTL" info --target="$TARGET" --deadline=10s > "$WORK/info.txt" \
  || { cat "$WORK/info.txt" >&2; fail "ropectl info"; }
grep -qi cpu "$WORK/info.txt" || { cat "$WORK/info.txt" >&2; fail "info does not name the cpu backend"; }
"$ROPECTL" rotate --target="$TARGET" --deadline=20s \
  --random_q_shape=1,16,4,64 --random_k_shape=1,16,2,64 --start_pos=100 \
  --out_q="$WORK/q_rot.npy" > "$WORK/rotate.txt" \
  || { cat "$WORK/rotate.txt" >&2; fail "ropectl rotate"; }
[ -s "$WORK/q_rot.npy" ] || fail "rotate wrote no output .npy"
head -n 4 "$WORK/rotate.txt"

# The rotate call is counted by the metrics endpoint (published port).
curl -sf --max-time 10 "http://127.0.0.1:$METRICS_PORT/metrics" > "$WORK/metrics.txt" \
  || fail "GET /metrics on 127.0.0.1:$METRICS_PORT"
grep -q 'rope_requests_total{.*rpc="Rotate"' "$WORK/metrics.txt" \
  || fail "/metrics has no rope_requests_total for Rotate"

# The image's own HEALTHCHECK (ropectl inside the container).
timeout 60 podman healthcheck run "$CONTAINER" > "$WORK/healthcheck.txt" 2>&1 \
  || { cat "$WORK/healthcheck.txt" >&2; fail "podman healthcheck run: unhealthy"; }
health=$(podman inspect --format '{{.State.Health.Status}}' "$CONTAINER")
[ "$health" = healthy ] || fail "HEALTHCHECK state is '$health', want healthy"
echo "container_test: HEALTHCHECK (ropectl health inside): $health"

# Not root inside.
uid=$(timeout 60 podman exec "$CONTAINER" id -u)
[ "$uid" != "0" ] || fail "the server runs as root"
echo "container_test: server uid $uid"

# --- SIGTERM -----------------------------------------------------------------
phase "podman stop (SIGTERM; SIGKILL only after 30 s)"
timeout 90 podman stop --time 30 "$CONTAINER" > /dev/null 2> "$WORK/stop.err" \
  || { cat "$WORK/stop.err" >&2; fail "podman stop"; }
code=$(podman inspect --format '{{.State.ExitCode}}' "$CONTAINER")
podman logs "$CONTAINER" > "$WORK/server.log" 2>&1 || true
if [ "$code" != "0" ]; then
  cat "$WORK/server.log" >&2
  fail "exit code $code after SIGTERM (137 = killed: the signal was not handled)"
fi
grep -q "draining" "$WORK/server.log" || { cat "$WORK/server.log" >&2; fail "no drain in the log"; }
grep -q "ropeserve: stopped" "$WORK/server.log" || { cat "$WORK/server.log" >&2; fail "no clean stop in the log"; }
echo "container_test: SIGTERM: drained and exited 0"

echo "container_test: PASS in $(( $(date +%s) - START )) s"
