#!/usr/bin/python3
"""Generates the rope.v1 modules of the ropeserve package from proto/.

The one rule that turns proto/rope/v1/rope.proto into
ropeserve/proto/{rope_pb2,rope_pb2_grpc}.py, used by both builds:
  * CMake (client/python/CMakeLists.txt, target ropeserve_python) passes
    --protoc $<TARGET_FILE:protobuf::protoc>;
  * pip (setup.py's build_py) finds protoc on PATH or in $PROTOC.

protoc's Python plugins name modules after the .proto path, so
rope_pb2_grpc.py would import its messages as the top-level package
`rope.v1`, which would clash with the unrelated `rope` refactoring library
(Debian's python3-rope). The modules live inside ropeserve instead, and the
one import line the gRPC plugin writes is made relative. The descriptor's
file name stays "rope/v1/rope.proto", as in every other language.

Usage: build_proto.py --out PACKAGE_ROOT [--proto-dir DIR] [--protoc P] [--plugin P]
writes PACKAGE_ROOT/ropeserve/proto/{__init__,rope_pb2,rope_pb2_grpc}.py.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

PROTO_FILE = "rope/v1/rope.proto"
DEFAULT_PLUGIN = "/usr/bin/grpc_python_plugin"
_GRPC_IMPORT = re.compile(r"^from rope\.v1 import rope_pb2 as ", re.M)
_INIT = '''"""rope.v1 messages (rope_pb2) and gRPC stubs (rope_pb2_grpc).

Generated from proto/rope/v1/rope.proto by client/python/build_proto.py when
the package is built; not committed, never edited by hand.
"""
'''


class GenerateError(RuntimeError):
    """protoc or its gRPC plugin is missing or failed; the message says which."""


def default_proto_dir():
    """proto/ of the repository this file sits in (client/python/../../proto)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "proto"))


def find_protoc():
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    if not protoc:
        raise GenerateError("protoc not found: apt-get install protobuf-compiler, or set $PROTOC")
    return protoc


def find_plugin():
    plugin = os.environ.get("GRPC_PYTHON_PLUGIN") or shutil.which("grpc_python_plugin") or DEFAULT_PLUGIN
    if not os.access(plugin, os.X_OK):
        raise GenerateError("%s not found: apt-get install protobuf-compiler-grpc, or set "
                            "$GRPC_PYTHON_PLUGIN" % plugin)
    return plugin


def generate(out_root, proto_dir=None, protoc=None, plugin=None):
    """Writes out_root/ropeserve/proto/*.py; returns the paths written."""
    proto_dir = proto_dir or os.environ.get("ROPESERVE_PROTO_DIR") or default_proto_dir()
    source = os.path.join(proto_dir, PROTO_FILE)
    if not os.path.isfile(source):
        raise GenerateError("%s not found: build from a ropeserve checkout, or set "
                            "$ROPESERVE_PROTO_DIR to its proto/ directory" % source)
    protoc = protoc or find_protoc()
    plugin = plugin or find_plugin()
    target = os.path.join(out_root, "ropeserve", "proto")
    os.makedirs(target, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ropeserve-proto-") as scratch:
        result = subprocess.run(
            [protoc, "--proto_path=" + proto_dir, "--python_out=" + scratch,
             "--grpc_out=" + scratch, "--plugin=protoc-gen-grpc=" + plugin, source],
            capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise GenerateError("%s failed on %s:\n%s" % (protoc, source, result.stderr))
        generated = os.path.join(scratch, "rope", "v1")
        with open(os.path.join(generated, "rope_pb2_grpc.py")) as f:
            stubs, count = _GRPC_IMPORT.subn("from . import rope_pb2 as ", f.read())
        if count != 1:
            raise GenerateError("%s wrote an unexpected import in rope_pb2_grpc.py (want one "
                                "'from rope.v1 import rope_pb2 as ...' line)" % plugin)
        outputs = {"__init__.py": _INIT, "rope_pb2_grpc.py": stubs}
        with open(os.path.join(generated, "rope_pb2.py")) as f:
            outputs["rope_pb2.py"] = f.read()
    written = []
    for name, text in outputs.items():
        path = os.path.join(target, name)
        with open(path, "w") as f:
            f.write(text)
        written.append(path)
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory that will hold ropeserve/proto/")
    parser.add_argument("--proto-dir", help="directory holding rope/v1/rope.proto")
    parser.add_argument("--protoc", help="protoc binary (default: $PROTOC or PATH)")
    parser.add_argument("--plugin", help="grpc_python_plugin (default: $GRPC_PYTHON_PLUGIN, "
                        "PATH or %s)" % DEFAULT_PLUGIN)
    args = parser.parse_args()
    try:
        generate(args.out, args.proto_dir, args.protoc, args.plugin)
    except GenerateError as e:
        print("build_proto.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
