"""The generated rope.v1 modules, and what this build of them supports.

Features that another change adds to rope.proto later are detected here from
the generated descriptors, never assumed: once the proto has them and the
package is rebuilt, the code paths that use them switch on by themselves.
"""

try:
    from .proto import rope_pb2
except ImportError as e:  # pragma: no cover - depends on how the package was built
    raise ImportError(
        "ropeserve: the generated rope.v1 modules (ropeserve.proto.rope_pb2) are missing. "
        "Install the package with pip (its build runs protoc), or import it from a CMake build "
        "tree after building the target ropeserve_python; see client/python/README.md") from e

pb = rope_pb2
SERVICE = rope_pb2.DESCRIPTOR.services_by_name["RopeService"]
TENSOR = rope_pb2.Tensor.DESCRIPTOR

# RopeConfig.hf_config_json / hf_layer_type and the ResolveConfig RPC (names
# fixed by the wire contract).
HAS_HF_CONFIG = {"hf_config_json", "hf_layer_type"} <= set(
    rope_pb2.RopeConfig.DESCRIPTOR.fields_by_name)
HAS_RESOLVE = "ResolveConfig" in SERVICE.methods_by_name
# Axial RoPE, fractional positions and BuildPositions.
HAS_AXIAL = "axial" in rope_pb2.RopeConfig.DESCRIPTOR.fields_by_name
HAS_BUILD_POSITIONS = "BuildPositions" in SERVICE.methods_by_name


def method_path(name):
    """"/rope.v1.RopeService/Name", as gRPC addresses the method."""
    return "/%s/%s" % (SERVICE.full_name, SERVICE.methods_by_name[name].name)
