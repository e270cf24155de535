"""Fixtures of the transformers model tests: one ropeserve on 127.0.0.1 and a client.

Run by run_with_transformers.py (ctest rope_python_transformers_test) with the
venv's python, PYTHONPATH holding the staged ropeserve package and
tests/support/python, and ROPESERVE_BINARY naming the built server.
"""

import os

import pytest

from ropeserve_process import RopeServe


@pytest.fixture(scope="session")
def client():
    import ropeserve
    binary = os.environ.get("ROPESERVE_BINARY")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("ROPESERVE_BINARY must name the built ropeserve (ctest sets it), got %r" % binary)
    with RopeServe(binary, ["--backend=cpu", "--cpu_threads=1", "--work_threads=2",
                            "--shutdown_grace_period=2s"]) as server:
        with ropeserve.Client(server.address, deadline=20.0) as c:
            yield c
