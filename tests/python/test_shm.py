"""Shared memory (SharedRegion, register_shm, rotate_shm) and the Unix socket, against real
ropeserve processes: results by reference must be the bytes path's, bit for bit."""

import os

import numpy as np
import pytest
import torch

import grpc
import ropeserve
from ropeserve import _shm_calls
from ropeserve.proto import rope_pb2_grpc

RNG = np.random.default_rng(16)
CONFIG = ropeserve.RopeConfig(head_dim=16, max_len=256, theta=10000.0, layout="half")


def test_rotate_shm_in_place_matches_the_bytes_path(client):
    with ropeserve.SharedRegion("py-inplace", 1 << 16) as region:
        client.register_shm(region)
        try:
            q = region.ndarray(np.float32, (2, 5, 4, 16))
            k = region.ndarray(np.float32, (2, 5, 2, 16), offset=q.nbytes)
            q[...] = RNG.standard_normal(q.shape)
            k[...] = RNG.standard_normal(k.shape)
            want_q, want_k = client.rotate(q.copy(), k.copy(), config=CONFIG, start_pos=9)
            client.rotate_shm(q, k, config=CONFIG, start_pos=9)
            np.testing.assert_array_equal(q, want_q)
            np.testing.assert_array_equal(k, want_k)
            status = client.shm_status()
            assert [r.name for r in status] == ["py-inplace"]
            assert status[0].byte_size == 1 << 16
        finally:
            client.unregister_shm("py-inplace")


def test_rotate_shm_torch_bfloat16_into_an_output_view(client):
    with ropeserve.SharedRegion("py-torch", 1 << 16) as region:
        client.register_shm(region)
        try:
            q = region.tensor(torch.bfloat16, (1, 7, 2, 16))
            out = region.tensor(torch.bfloat16, (1, 7, 2, 16), offset=4096)
            q.copy_(torch.randn(1, 7, 2, 16, dtype=torch.bfloat16))
            before = q.clone()
            want, _ = client.rotate(q.clone(), config=CONFIG, positions=list(range(3, 10)))
            client.rotate_shm(q, config=CONFIG, positions=list(range(3, 10)), q_out=out)
            assert torch.equal(q, before)
            assert torch.equal(out, want)
        finally:
            client.unregister_shm()


def test_region_errors_are_specific(client, server):
    with ropeserve.SharedRegion("py-errors", 4096) as region:
        client.register_shm(region)
        try:
            with pytest.raises(ropeserve.AlreadyExists, match="already registered"):
                client.register_shm(region)
            q = region.ndarray(np.float32, (1, 2, 1, 16))
            # Another connection is another client: the region is not its. (gRPC shares
            # one connection between channels of equal arguments: ask for a local pool.)
            request = _shm_calls.rotate_request({region.name: region}, q, config=CONFIG)
            channel = grpc.insecure_channel(server.address,
                                            options=[("grpc.use_local_subchannel_pool", 1)])
            with channel:
                stub = rope_pb2_grpc.RopeServiceStub(channel)
                with pytest.raises(grpc.RpcError) as refused:
                    stub.Rotate(request, timeout=20)
                assert refused.value.code() == grpc.StatusCode.NOT_FOUND
                assert 'q.shm.region "py-errors" is not registered' in refused.value.details()
            # Overlapping output.
            out = region.ndarray(np.float32, (1, 2, 1, 16), offset=64)
            with pytest.raises(ropeserve.InvalidArgument, match="overlaps q.shm"):
                client.rotate_shm(q, config=CONFIG, q_out=out)
        finally:
            client.unregister_shm("py-errors")
        with pytest.raises(ropeserve.NotFound, match='"py-errors" is not registered'):
            client.unregister_shm("py-errors")
    with pytest.raises(ValueError, match="does not view a SharedRegion registered"):
        client.rotate_shm(np.zeros((1, 2, 1, 16), np.float32), config=CONFIG)


def test_unix_socket_serves_the_client_and_shared_memory():
    from ropeserve_process import unix_socket_path
    with unix_socket_path() as path, _unix_server(path) as server:
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        with ropeserve.Client("unix://" + path) as client, \
                ropeserve.SharedRegion("py-unix", 4096) as region:
            q = RNG.standard_normal((1, 3, 2, 16)).astype(np.float32)
            want, _ = client.rotate(q, config=CONFIG)
            client.register_shm(region)
            view = region.ndarray(np.float32, q.shape)
            view[...] = q
            client.rotate_shm(view, config=CONFIG)
            np.testing.assert_array_equal(view, want)
        assert server.proc.poll() is None


def _unix_server(path):
    from ropeserve_process import RopeServe
    from conftest import SERVER_ARGS, ropeserve_binary
    return RopeServe(ropeserve_binary(), SERVER_ARGS + ["--unix_socket_mode=0600"],
                     listen="127.0.0.1:0,unix://" + path)


def test_aio_client_rotates_by_reference(server):
    import asyncio

    async def run():
        async with ropeserve.aio.Client(server.address) as client:
            with ropeserve.SharedRegion("py-aio", 4096) as region:
                await client.register_shm(region)
                q = region.ndarray(np.float32, (1, 3, 2, 16))
                q[...] = RNG.standard_normal(q.shape)
                want, _ = await client.rotate(q.copy(), config=CONFIG, start_pos=2)
                await client.rotate_shm(q, config=CONFIG, start_pos=2)
                np.testing.assert_array_equal(q, want)
                assert [r.name for r in await client.shm_status()] == ["py-aio"]
                await client.unregister_shm()
                assert await client.shm_status() == []

    asyncio.run(run())
