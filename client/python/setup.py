"""setuptools hook: generate ropeserve/proto/ from rope.proto while building.

All metadata lives in pyproject.toml. build_py runs build_proto.py (the same
generator CMake's ropeserve_python target runs) into the build directory, so
an installed package always carries stubs made from the proto/ it was built
with. Needs protoc (protobuf-compiler) and grpc_python_plugin
(protobuf-compiler-grpc).
"""

import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _build_proto():
    spec = importlib.util.spec_from_file_location("build_proto", os.path.join(HERE, "build_proto.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithProto(build_py):
    def run(self):
        super().run()
        build_proto = _build_proto()
        try:
            self._generated = build_proto.generate(self.build_lib)
        except build_proto.GenerateError as e:
            raise SystemExit("ropeserve: %s" % e) from None

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + list(getattr(self, "_generated", []))


setup(cmdclass={"build_py": BuildPyWithProto})
