#!/usr/bin/env bash
# Generates the Python modules of rope/v1/rope.proto (messages and gRPC stubs)
# into OUT_DIR, importable as `from rope.v1 import rope_pb2, rope_pb2_grpc`
# once OUT_DIR is on sys.path.
#
# Usage: client/python/generate_stubs.sh [OUT_DIR]
#   OUT_DIR defaults to ${TMPDIR:-/tmp}/ropeserve-python-stubs.
#
# Needs Debian's protobuf-compiler (protoc) and protobuf-compiler-grpc
# (/usr/bin/grpc_python_plugin). Not python3-grpc-tools: it bundles an older
# protoc. The generated code runs on Debian's python3-protobuf and
# python3-grpcio (use /usr/bin/python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
out="${1:-${TMPDIR:-/tmp}/ropeserve-python-stubs}"
protoc="${PROTOC:-protoc}"
plugin="${GRPC_PYTHON_PLUGIN:-/usr/bin/grpc_python_plugin}"

command -v "${protoc}" >/dev/null || { echo "generate_stubs.sh: ${protoc} not found (apt-get install protobuf-compiler)" >&2; exit 1; }
[[ -x "${plugin}" ]] || { echo "generate_stubs.sh: ${plugin} not found (apt-get install protobuf-compiler-grpc)" >&2; exit 1; }

mkdir -p "${out}"
"${protoc}" \
  --proto_path="${repo}/proto" \
  --python_out="${out}" \
  --grpc_out="${out}" \
  --plugin=protoc-gen-grpc="${plugin}" \
  "${repo}/proto/rope/v1/rope.proto"
# Regular packages, so that an installed package named "rope" (the Python
# refactoring library) cannot shadow ours when OUT_DIR comes first on sys.path.
touch "${out}/rope/__init__.py" "${out}/rope/v1/__init__.py"
echo "${out}"
