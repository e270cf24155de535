"""Fixtures of the Python client tests: real ropeserve processes on 127.0.0.1.

ctest (tests/python/CMakeLists.txt) runs pytest with PYTHONPATH holding the
staged ropeserve package and tests/support/python, and ROPESERVE_BINARY set
to the built server. Servers are started with tests/support/python's
RopeServe and stopped (SIGTERM) when their fixture ends.
"""

import os
import shutil

import pytest

from ropeserve_process import RopeServe

SERVER_ARGS = ["--backend=cpu", "--cpu_threads=1", "--work_threads=2", "--shutdown_grace_period=2s"]
TOKEN = "py-client-token-5e1"


def ropeserve_binary():
    binary = os.environ.get("ROPESERVE_BINARY")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("ROPESERVE_BINARY must name the built ropeserve (ctest sets it), got %r" % binary)
    return binary


def start_server(*extra_args, metrics=False):
    """A RopeServe with the test defaults; use as a context manager."""
    return RopeServe(ropeserve_binary(), SERVER_ARGS + list(extra_args), metrics=metrics)


@pytest.fixture(scope="session")
def server():
    with start_server() as s:
        yield s


@pytest.fixture(scope="session")
def client(server):
    import ropeserve
    with ropeserve.Client(server.address, deadline=20.0) as c:
        yield c


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """Directory of throw-away certificates (see throwaway_pki) and a token file."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl CLI is needed for the TLS tests (Debian: openssl)")
    from throwaway_pki import make_certs
    d = str(tmp_path_factory.mktemp("pki"))
    make_certs(d)
    with open(os.path.join(d, "tokens"), "w") as f:
        f.write("# accepted tokens\n%s\n" % TOKEN)
    return d


@pytest.fixture(scope="session")
def secure_server(pki):
    """ropeserve with mutual TLS and a bearer token."""
    with start_server("--tls_cert_file=%s/server.pem" % pki, "--tls_key_file=%s/server.key" % pki,
                      "--tls_client_ca_file=%s/ca.pem" % pki,
                      "--auth_token_file=%s/tokens" % pki) as s:
        yield s
