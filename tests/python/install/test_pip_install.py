"""The documented install command works in a fresh venv, with no package index.

Runs what client/python/README.md tells a new user to run on Debian 12,
   python3 -m venv --system-site-packages .venv
   .venv/bin/pip install --no-index --no-build-isolation client/python
on a copy of client/python and proto/ (pip builds in the source tree; the
checkout stays clean), then rotates a torch bfloat16 tensor with the
installed package against a real ropeserve, from outside the repository.
"""

import os
import shutil
import subprocess

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
PYTHON = "/usr/bin/python3"
VENV = [PYTHON, "-m", "venv", "--system-site-packages", ".venv"]
PIP = [".venv/bin/pip", "install", "--no-index", "--no-build-isolation", "client/python"]

THREE_LINES = r"""
import sys, torch, ropeserve
assert ropeserve.__file__.startswith(sys.argv[2]), ropeserve.__file__
client = ropeserve.Client(sys.argv[1])
q, k = client.rotate(torch.randn(1, 16, 8, 128, dtype=torch.bfloat16),
                     config=ropeserve.RopeConfig(head_dim=128, max_len=4096, layout="half"), start_pos=7)
assert q.dtype == torch.bfloat16 and q.shape == (1, 16, 8, 128) and k is None
import ropeserve.proto.rope_pb2_grpc
print("installed ropeserve", ropeserve.__version__, "rotated", tuple(q.shape))
"""


def run(cmd, cwd, timeout, env=None):
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, "%s failed:\n%s\n%s" % (" ".join(cmd), result.stdout, result.stderr)
    return result


def test_readme_documents_the_command_this_test_runs():
    with open(os.path.join(REPO, "client", "python", "README.md")) as f:
        readme = f.read()
    assert " ".join(VENV).replace(PYTHON, "python3") in readme
    assert " ".join(PIP) in readme


def test_pip_install_into_a_fresh_venv_then_rotate(server, tmp_path):
    checkout = tmp_path / "checkout"
    shutil.copytree(os.path.join(REPO, "client", "python"), checkout / "client" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(os.path.join(REPO, "proto"), checkout / "proto")
    run(VENV, checkout, 180)
    run(PIP, checkout, 300)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    venv_site = str(checkout / ".venv")
    result = run([str(checkout / ".venv" / "bin" / "python"), "-c", THREE_LINES, server.address, venv_site],
                 tmp_path, 120, env=env)
    assert "installed ropeserve 0.1.0 rotated (1, 16, 8, 128)" in result.stdout
