# ropeserve container image: a build stage that compiles ropeserve and the
# client tools with the project's own scripts, and a slim runtime stage with
# only those binaries and the shared libraries they load.
#
# GPU image (the default; NVIDIA's CUDA images, Ubuntu 24.04, whose gRPC 1.51,
# protobuf 3.21 and Abseil 20220623 packages match Debian 12's):
#
#   docker build -t ropeserve:gpu .
#   docker run --gpus=1 -p 127.0.0.1:50051:50051 -p 127.0.0.1:9090:9090 ropeserve:gpu
#
# CPU-only image (plain Debian 12; no CUDA toolkit, the CPU backend):
#
#   docker build -t ropeserve:cpu \
#     --build-arg BUILD_IMAGE=debian:bookworm --build-arg RUNTIME_IMAGE=debian:bookworm-slim .
#
# scripts/container_test.sh builds the CPU image with podman from a local
# debootstrap base (no registry is reachable in CI) and tests it.
#
# BUILD_IMAGE and RUNTIME_IMAGE must be the same distribution release: the
# runtime stage installs the packages, by name, that own the libraries the
# binaries were linked against in the build stage.
#
# BINARIES names the stage the runtime stage takes its binaries from:
#   build     (the default) compile them in the build stage above;
#   prebuilt  take them from image-bin/ in the build context: bin/ (ropeserve,
#             ropectl, ropeload, stripped) and runtime-packages.txt (from
#             deploy/image/runtime-packages.sh), made on a host of the same
#             release as RUNTIME_IMAGE. scripts/container_test.sh does this
#             with the binaries the test build already made, so that CI does
#             not compile them twice.
# The stage not named is skipped (BuildKit; podman/buildah, which need the
# value spelled out: --build-arg BINARIES=build).
ARG BUILD_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04
ARG RUNTIME_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
ARG BINARIES=build

FROM ${BUILD_IMAGE} AS build
# Marks this project's layers, so that scripts can prune the stale ones alone.
LABEL ropeserve.stage=build
ENV DEBIAN_FRONTEND=noninteractive
# The package list alone first, so that editing sources keeps this layer.
COPY scripts/setup.sh /src/scripts/setup.sh
RUN /src/scripts/setup.sh --build && rm -rf /var/lib/apt/lists/*

COPY . /src
WORKDIR /src
# Extra CMake arguments, e.g. --build-arg CMAKE_ARGS="-DROPE_ENABLE_CUDA=ON
# -DCMAKE_CUDA_ARCHITECTURES=80-real;90-real". By default (ROPE_ENABLE_CUDA=AUTO)
# the CUDA backend is built when CMake finds nvcc, as in the CUDA devel image,
# and the stub backend otherwise (plain Debian).
ARG CMAKE_ARGS=""
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_TESTING=OFF -DROPE_BUILD_BENCHMARKS=OFF ${CMAKE_ARGS} \
    && cmake --build /build -j"$(nproc)" \
    && mkdir -p /out/bin \
    && cp /build/bin/* /out/bin/ \
    && strip --strip-unneeded /out/bin/* \
    && deploy/image/runtime-packages.sh /out/bin/* > /out/runtime-packages.txt \
    && echo "runtime packages:" $(cat /out/runtime-packages.txt)

FROM scratch AS prebuilt
COPY image-bin/ /out/

FROM ${BINARIES} AS binaries

FROM ${RUNTIME_IMAGE} AS runtime
LABEL ropeserve.stage=runtime
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=binaries /out/runtime-packages.txt /tmp/runtime-packages.txt
# haproxy: the front proxy the Kubernetes and compose deployments run as the
# pod's listener (a second container of this image, command haproxy; see
# deploy/proxy/haproxy.cfg).
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends $(cat /tmp/runtime-packages.txt) haproxy \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /tmp/runtime-packages.txt \
    && useradd --system --uid 10001 --user-group --no-create-home \
         --home-dir /nonexistent --shell /usr/sbin/nologin ropeserve

# ropeserve, ropectl (and ropeload when the build has it).
COPY --from=binaries /out/bin/ /usr/local/bin/
# The front proxy's configuration, driven by its environment (ROPE_BACKEND,
# ROPE_PROXY_BIND, ROPE_PROXY_TLS_CERT, ...): `haproxy -W -db -f
# /usr/share/ropeserve/haproxy.cfg`.
COPY deploy/proxy/haproxy.cfg /usr/share/ropeserve/haproxy.cfg

LABEL org.opencontainers.image.title="ropeserve" \
      org.opencontainers.image.description="Rotary position embeddings as a gRPC service"

# Not root; the server writes nothing to disk, so a read-only root file
# system works (deploy/ sets readOnlyRootFilesystem).
USER 10001:10001

# gRPC (rope.v1.RopeService, grpc.health.v1, reflection) and Prometheus
# /metrics. This default command serves gRPC directly: for trusted networks
# only. From any untrusted network, run the proxy in front (the Kubernetes
# and compose files do; docs/operations.md "Security").
EXPOSE 50051 9090

# The project's own client: exit 0 only while health is SERVING (a draining
# server reports NOT_SERVING). Assumes the default --listen port.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
  CMD ["ropectl", "health", "--target=127.0.0.1:50051", "--deadline=3s"]

# ropeserve is PID 1 and handles SIGTERM itself (SIGQUIT too; SIGHUP and
# other stray signals are ignored): health turns NOT_SERVING,
# new calls get UNAVAILABLE, calls in flight finish within
# --shutdown_grace_period, then it exits 0. Arguments given to `docker run`
# (or Kubernetes `args`) follow these flags, and a repeated flag's last value
# wins, so any default here can be overridden.
STOPSIGNAL SIGTERM
ENTRYPOINT ["ropeserve", "--listen=0.0.0.0:50051", "--metrics_port=9090", \
            "--metrics_host=0.0.0.0", "--shutdown_grace_period=25s"]
