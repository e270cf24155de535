"""TLS, mutual TLS and bearer tokens, against ropeserve started with them."""

import asyncio
import os

import numpy as np
import pytest

import ropeserve
import rope_reference as ref
from conftest import TOKEN

CONFIG = ropeserve.RopeConfig(head_dim=16, max_len=64, layout="half")
Q = np.random.default_rng(3).standard_normal((1, 4, 2, 16)).astype(np.float32)


def secure_client(server, pki, cert="client", token=TOKEN, **kwargs):
    files = dict(ca_file=os.path.join(pki, "ca.pem"))
    if cert:
        files.update(cert_file=os.path.join(pki, cert + ".pem"), key_file=os.path.join(pki, cert + ".key"))
    return ropeserve.Client(server.address, token=token, deadline=10.0, **files, **kwargs)


def test_mutual_tls_with_token_rotates(secure_server, pki):
    with secure_client(secure_server, pki) as c:
        q_out, _ = c.rotate(Q, config=CONFIG, start_pos=5)
    ref.assert_close(q_out, ref.rotate(Q, 5 + np.arange(4), ref.plain_inv_freq(10000.0, 16), 16, True),
                     "float32")


def test_missing_token_is_unauthenticated(secure_server, pki):
    with secure_client(secure_server, pki, token=None) as c:
        with pytest.raises(ropeserve.Unauthenticated, match="missing bearer token"):
            c.info()


def test_wrong_token_is_unauthenticated(secure_server, pki):
    with secure_client(secure_server, pki, token="not-the-token") as c:
        with pytest.raises(ropeserve.Unauthenticated, match="bearer token not accepted"):
            c.rotate(Q, config=CONFIG)


@pytest.mark.parametrize("cert", [None, "outsider"])
def test_without_an_accepted_client_certificate_no_connection(secure_server, pki, cert):
    with secure_client(secure_server, pki, cert=cert) as c:
        with pytest.raises(ropeserve.Unavailable):
            c.info()


def test_plaintext_client_cannot_reach_a_tls_server(secure_server):
    with ropeserve.Client(secure_server.address, deadline=10.0) as c:
        with pytest.raises(ropeserve.Unavailable):
            c.info()


def test_aio_client_over_mutual_tls_with_token(secure_server, pki):
    async def run():
        async with ropeserve.aio.Client(
                secure_server.address, ca_file=os.path.join(pki, "ca.pem"),
                cert_file=os.path.join(pki, "client.pem"), key_file=os.path.join(pki, "client.key"),
                token=TOKEN, deadline=10.0) as c:
            info = await c.info()
            q_out, _ = await c.rotate(Q, config=CONFIG)
            return info, q_out

    info, q_out = asyncio.run(run())
    assert info.backend == "cpu"
    ref.assert_close(q_out, ref.rotate(Q, np.arange(4), ref.plain_inv_freq(10000.0, 16), 16, True), "float32")


def test_missing_certificate_file_names_the_path(pki):
    with pytest.raises(FileNotFoundError, match="missing.pem"):
        ropeserve.Client("127.0.0.1:1", ca_file=os.path.join(pki, "missing.pem"))
