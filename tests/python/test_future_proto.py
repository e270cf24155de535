"""The client's hf_config_json / ResolveConfig paths, switched on by a rope.proto that has them.

Until rope.proto gains RopeConfig.hf_config_json, hf_layer_type and the
ResolveConfig RPC (names fixed by the wire contract), the package refuses
them (test_config.py). This test builds the package against a copy of
rope.proto with those additions, as it will be built once they land, and
checks against today's server (which lacks them) that the client sends them
by name: ResolveConfig reaches the server and comes back UNIMPLEMENTED, and a
from_hf config reaches Rotate, where the server, ignoring the unknown field,
refuses the head_dim of 0.
"""

import os
import re
import shutil
import subprocess
import sys

import ropeserve

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

FUTURE_FIELDS = """
  string hf_config_json = 100;
  string hf_layer_type = 101;
"""
FUTURE_MESSAGES = """
message ResolvedConfig {
  RopeConfig config = 1;
  repeated double inv_freq = 2;
  double attention_factor = 3;
}
"""
FUTURE_RPC = "  rpc ResolveConfig(RopeConfig) returns (ResolvedConfig);\n"

CHECK = r"""
import json, sys
import numpy as np
import ropeserve
assert ropeserve.HAS_HF_CONFIG and ropeserve.HAS_RESOLVE
hf = {"rope_theta": 500000.0, "head_dim": 8, "max_position_embeddings": 64,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}
config = ropeserve.RopeConfig.from_hf(hf, "sliding_attention")
assert (config.head_dim, config.max_len, config.layout) == (0, 64, ropeserve.Layout.HALF), config
message = config.to_proto()
assert json.loads(message.hf_config_json) == hf and message.hf_layer_type == "sliding_attention"
assert ropeserve.RopeConfig.from_proto(message) == config
with ropeserve.Client(sys.argv[1], deadline=20.0) as client:
    try:
        client.resolve(config)
        raise SystemExit("resolve() did not fail against a server without ResolveConfig")
    except ropeserve.Unimplemented as e:
        assert e.code.name == "UNIMPLEMENTED", e
    try:
        client.rotate(np.zeros((1, 2, 2, 8), np.float32), config=config)
        raise SystemExit("rotate() with head_dim 0 did not fail")
    except ropeserve.InvalidArgument as e:
        assert "head_dim" in e.details, e
print("future proto OK")
"""


def future_proto(proto_dir):
    """Copies proto/ into proto_dir with the fields and RPC issue 13 fixes."""
    shutil.copytree(os.path.join(REPO, "proto"), proto_dir)
    path = os.path.join(proto_dir, "rope", "v1", "rope.proto")
    with open(path) as f:
        text = f.read()
    text, fields = re.subn(r"(message RopeConfig \{\n)", r"\1" + FUTURE_FIELDS, text)
    text, rpcs = re.subn(r"(service RopeService \{\n)", r"\1" + FUTURE_RPC, text)
    assert fields == 1 and rpcs == 1, "rope.proto changed shape: update this test"
    with open(path, "w") as f:
        f.write(text.replace("service RopeService {", FUTURE_MESSAGES + "\nservice RopeService {"))


def test_hf_config_and_resolve_switch_on_with_the_proto(server, tmp_path):
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    try:
        import build_proto
    finally:
        sys.path.pop(0)
    future_proto(str(tmp_path / "proto"))
    site = tmp_path / "site"
    shutil.copytree(os.path.dirname(ropeserve.__file__), site / "ropeserve",
                    ignore=shutil.ignore_patterns("proto", "__pycache__"))
    build_proto.generate(str(site), proto_dir=str(tmp_path / "proto"))
    env = dict(os.environ, PYTHONPATH=str(site))
    result = subprocess.run([sys.executable, "-c", CHECK, server.address], env=env, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "future proto OK" in result.stdout
