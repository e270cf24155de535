"""The package as users meet it: its README example runs, torch stays optional, versions agree."""

import os
import re
import subprocess
import sys

import ropeserve

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def test_readme_example_runs(server):
    with open(os.path.join(REPO, "client", "python", "README.md")) as f:
        example = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
    assert "localhost:50051" in example
    namespace = {}
    exec(compile(example.replace("localhost:50051", server.address), "README.md", "exec"), namespace)  # noqa: S102
    q, k = namespace["q"], namespace["k"]
    assert str(q.dtype) == "torch.bfloat16" and tuple(q.shape) == (1, 16, 32, 128) and tuple(k.shape) == (1, 16, 8, 128)


def test_importing_the_package_does_not_import_torch():
    code = "import sys, ropeserve, ropeserve.aio; assert 'torch' not in sys.modules, 'torch imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def test_package_version_is_the_projects():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        project_version = re.search(r"project\(ropeserve VERSION (\S+)", f.read()).group(1)
    with open(os.path.join(REPO, "client", "python", "pyproject.toml")) as f:
        package_version = re.search(r'^version = "(.*)"', f.read(), re.M).group(1)
    assert ropeserve.__version__ == package_version == project_version
