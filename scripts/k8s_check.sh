#!/usr/bin/env bash
# Checks the deployment files under deploy/ without a cluster:
#   1. yamllint (deploy/.yamllint.yaml) on every YAML file there;
#   2. `kubectl kustomize` renders each overlay (deploy/k8s/overlays/*: cpu,
#      cpu-tls, gpu) and the gpu overlay with the tls component
#      (deploy/k8s/components/tls), which must work on any overlay;
#   3. deploy/check/check_manifests.py asserts the properties ropeserve needs
#      on each rendered overlay, on the KServe example (deploy/k8s/examples/
#      kserve: ServingRuntime + InferenceService) and on the compose file, and its self-test
#      proves that it catches each property broken on purpose.
#
# Installs yamllint and python3-yaml when missing (root or sudo). kubectl is
# not a Debian package of this release in a usable version (Debian 12's
# kubernetes-client is kubectl 1.20, whose kustomize v2 predates the
# kustomization fields used here), so it is used when present (kustomize v4+,
# kubectl 1.21+); without it the render and the manifest check are skipped
# with a message, or fail when ROPE_REQUIRE_KUBECTL=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=/usr/bin/python3

missing=()
for p in yamllint python3-yaml; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  echo "k8s_check: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 \
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

WORK=$(mktemp -d /tmp/ropeserve-k8s-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "k8s_check: yamllint deploy/"
yamllint --strict -c deploy/.yamllint.yaml deploy/

COMPOSE=deploy/compose/compose.yaml
"$PYTHON" deploy/check/check_manifests.py compose "$COMPOSE"
# The same-host sidecar example is plain YAML: checked without kubectl.
SIDECAR=deploy/k8s/examples/sidecar/deployment.yaml
"$PYTHON" deploy/check/check_manifests.py sidecar "$SIDECAR"
"$PYTHON" deploy/check/check_manifests.py sidecar-self-test "$SIDECAR"

if ! command -v kubectl >/dev/null; then
  message="kubectl not found: skipping the kustomize render and the manifest check (needs kubectl >= 1.21, i.e. kustomize v4+)"
  if [ "${ROPE_REQUIRE_KUBECTL:-0}" = 1 ]; then
    echo "k8s_check: FAIL: $message" >&2
    exit 1
  fi
  echo "k8s_check: SKIP: $message"
  exit 0
fi
echo "k8s_check: $(kubectl version --client 2>/dev/null | tr '\n' ' ')"

# render_and_check VARIANT DIR: renders DIR, then checks it as VARIANT.
render_and_check() {
  local variant=$1 dir=$2
  local rendered=$WORK/$variant.yaml
  echo "k8s_check: kubectl kustomize $dir"
  if ! timeout 120 kubectl kustomize "$dir" > "$rendered" 2> "$WORK/$variant.err"; then
    cat "$WORK/$variant.err" >&2
    echo "k8s_check: FAIL: kubectl kustomize $dir" >&2
    exit 1
  fi
  # Deprecation warnings mean the kustomization needs updating.
  if [ -s "$WORK/$variant.err" ]; then
    cat "$WORK/$variant.err" >&2
    echo "k8s_check: FAIL: kubectl kustomize $dir printed warnings" >&2
    exit 1
  fi
  "$PYTHON" deploy/check/check_manifests.py k8s --variant="$variant" "$rendered"
  "$PYTHON" deploy/check/check_manifests.py self-test --variant="$variant" "$rendered" \
    --compose "$COMPOSE"
}

found=()
for dir in deploy/k8s/overlays/*/; do
  variant=$(basename "$dir")
  render_and_check "$variant" "$dir"
  found+=("$variant")
done
# The glob's order depends on the locale.
found_sorted=$(printf '%s\n' "${found[@]}" | LC_ALL=C sort | paste -sd' ')
[ "$found_sorted" = "cpu cpu-tls gpu" ] || {
  echo "k8s_check: FAIL: expected overlays cpu cpu-tls gpu, found $found_sorted" >&2
  exit 1
}

# The tls component on the other overlay, from a kustomization outside the
# tree (kustomize takes only relative paths there).
mkdir "$WORK/gpu-tls"
rel=$(realpath --relative-to="$WORK/gpu-tls" deploy/k8s)
cat > "$WORK/gpu-tls/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $rel/overlays/gpu
components:
  - $rel/components/tls
EOF
render_and_check gpu-tls "$WORK/gpu-tls/"

# The KServe example: a ServingRuntime and an InferenceService (KServe's
# CRDs; rendered and checked, no cluster needed).
echo "k8s_check: kubectl kustomize deploy/k8s/examples/kserve"
if ! timeout 120 kubectl kustomize deploy/k8s/examples/kserve > "$WORK/kserve.yaml" \
    2> "$WORK/kserve.err" || [ -s "$WORK/kserve.err" ]; then
  cat "$WORK/kserve.err" >&2
  echo "k8s_check: FAIL: kubectl kustomize deploy/k8s/examples/kserve" >&2
  exit 1
fi
"$PYTHON" deploy/check/check_manifests.py kserve "$WORK/kserve.yaml"
"$PYTHON" deploy/check/check_manifests.py kserve-self-test "$WORK/kserve.yaml"
echo "k8s_check: PASS (overlays $found_sorted, gpu + the tls component and the KServe example rendered and checked)"
