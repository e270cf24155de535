"""Shared memory (SharedRegion, register_shm, rotate_shm) and the Unix socket, against real
ropeserve processes: results by reference must be the bytes path's, bit for bit. CudaRegion:
its checks and references here (no GPU: __cuda_array_interface__ stand-ins), and the CPU
server's refusal to register it."""

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
            assert status[0].key == region.key
            assert status[0].cuda_ipc is False and status[0].cuda_device == 0
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
            # Another connection from the same host is the same client (regions are
            # owned by identity, and survive a reconnect); a name nobody registered is
            # NOT_FOUND. (gRPC shares one connection between channels of equal
            # arguments: ask for a local pool.)
            request = _shm_calls.rotate_request({region.name: region}, q, config=CONFIG)
            channel = grpc.insecure_channel(server.address,
                                            options=[("grpc.use_local_subchannel_pool", 1)])
            with channel:
                stub = rope_pb2_grpc.RopeServiceStub(channel)
                stub.Rotate(request, timeout=20)
                request.q.shm.region = "py-nobody"
                with pytest.raises(grpc.RpcError) as refused:
                    stub.Rotate(request, timeout=20)
                assert refused.value.code() == grpc.StatusCode.NOT_FOUND
                assert 'q.shm.region "py-nobody" is not registered' in refused.value.details()
            # Overlapping output.
            out = region.ndarray(np.float32, (1, 2, 1, 16), offset=64)
            with pytest.raises(ropeserve.InvalidArgument, match="overlaps q.shm"):
                client.rotate_shm(q, config=CONFIG, q_out=out)
        finally:
            client.unregister_shm("py-errors")
        with pytest.raises(ropeserve.NotFound, match='"py-errors" is not registered'):
            client.unregister_shm("py-errors")
    with pytest.raises(ValueError, match="does not view a region registered"):
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


# ---- CudaRegion (device memory by CUDA IPC handle) ----

HANDLE = bytes(range(64))  # the shape of a cudaIpcMemHandle_t; never opened here
BASE = 0x7F00_0000_0000  # a device address the stand-ins below pretend to live at


class FakeCudaArray:
    """A cupy-like array without a device: only __cuda_array_interface__ (version 3)."""

    def __init__(self, address, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"data": (address, False), "shape": tuple(shape),
                                         "typestr": typestr, "strides": strides, "version": 3}


def test_cuda_region_checks_its_arguments_before_any_call():
    for size in (0, 63, 65, 66):
        with pytest.raises(ValueError, match="ipc_handle is %d bytes: a cudaIpcMemHandle_t is 64"
                           % size):
            ropeserve.CudaRegion("gpu", bytes(size), 4096)
    with pytest.raises(TypeError, match="ipc_handle is a str"):
        ropeserve.CudaRegion("gpu", "x" * 64, 4096)
    with pytest.raises(ValueError, match="byte_size is 0"):
        ropeserve.CudaRegion("gpu", HANDLE, 0)
    with pytest.raises(ValueError, match="device is -1"):
        ropeserve.CudaRegion("gpu", HANDLE, 4096, device=-1)
    with pytest.raises(ValueError, match="name is ''"):
        ropeserve.CudaRegion("", HANDLE, 4096)
    with pytest.raises(ValueError, match="base_address is 0"):
        ropeserve.CudaRegion("gpu", HANDLE, 4096, base_address=0)
    # Not a region at all: refused before the channel is used (nothing listens on port 1).
    with ropeserve.Client("127.0.0.1:1", deadline=2.0) as nowhere:
        with pytest.raises(TypeError, match="expected a ropeserve.SharedRegion or ropeserve.CudaRegion"):
            nowhere.register_shm(object())


def test_cuda_region_request_and_references():
    region = ropeserve.CudaRegion("gpu", bytearray(HANDLE), 1 << 20, device=2, base_address=BASE)
    request = region.register_request()
    assert (request.name, request.cuda_ipc_handle, request.cuda_device, request.byte_size) == \
        ("gpu", HANDLE, 2, 1 << 20)
    assert request.key == "" and request.offset == 0

    q = FakeCudaArray(BASE + 256, (1, 2, 4, 16))
    k = FakeCudaArray(BASE + 4096, (1, 2, 2, 16), typestr="<f2",
                      strides=(128, 64, 32, 2))  # explicit C-contiguous strides
    out = FakeCudaArray(BASE + 8192, (1, 2, 4, 16))
    request = _shm_calls.rotate_request({"gpu": region}, q, k, config=CONFIG, start_pos=3,
                                        q_out=out)
    assert (request.q.shm.region, request.q.shm.offset, request.q.shm.byte_size) == ("gpu", 256, 512)
    assert request.q.dtype == ropeserve.proto.rope_pb2.FLOAT32 and list(request.q.shape) == [1, 2, 4, 16]
    assert (request.k.shm.offset, request.k.shm.byte_size) == (4096, 128)
    assert request.k.dtype == ropeserve.proto.rope_pb2.FLOAT16
    assert (request.q_out.region, request.q_out.offset) == ("gpu", 8192)
    assert not request.q.data and not request.k.data

    # Host and device regions side by side: each array finds its own.
    with ropeserve.SharedRegion("host", 4096) as host:
        host_q = host.ndarray(np.float32, (1, 2, 4, 16))
        both = {"host": host, "gpu": region}
        assert _shm_calls.rotate_request(both, q, config=CONFIG).q.shm.region == "gpu"
        assert _shm_calls.rotate_request(both, host_q, config=CONFIG).q.shm.region == "host"
        with pytest.raises(ValueError, match="holds CUDA tensors"):
            region.ref(host_q)

    with pytest.raises(ValueError, match="does not lie inside region 'gpu'"):
        region.ref(FakeCudaArray(BASE + (1 << 20) - 256, (1, 2, 4, 16)))
    with pytest.raises(ValueError, match="must be C-contiguous"):
        region.ref(FakeCudaArray(BASE, (1, 2, 4, 16), strides=(512, 64, 128, 4)))
    with pytest.raises(ValueError, match="dtype float64"):
        _shm_calls.rotate_request({"gpu": region}, FakeCudaArray(BASE, (1, 1, 1, 16), "<f8"),
                                  config=CONFIG)
    with pytest.raises(ValueError, match="does not view a region registered"):
        _shm_calls.rotate_request({"gpu": region}, FakeCudaArray(BASE - 64, (1, 1, 1, 16)),
                                  config=CONFIG)
    # Without base_address the region can be registered but places no tensor.
    unplaced = ropeserve.CudaRegion("gpu", HANDLE, 1 << 20)
    assert not unplaced.contains(q)
    with pytest.raises(ValueError, match="without base_address"):
        unplaced.ref(q)


def test_cpu_server_refuses_a_cuda_region(client):
    region = ropeserve.CudaRegion("py-cuda", HANDLE, 4096, base_address=BASE)
    with pytest.raises(ropeserve.FailedPrecondition, match="cuda_ipc_handle") as refused:
        client.register_shm(region)
    assert "--backend=cuda" in refused.value.details
    assert "py-cuda" not in [r.name for r in client.shm_status()]
    # A refused region is not one of the client's: rotate_shm does not reference it.
    with pytest.raises(ValueError, match="does not view a region registered"):
        client.rotate_shm(FakeCudaArray(BASE, (1, 2, 1, 16)), config=CONFIG)


def test_aio_cpu_server_refuses_a_cuda_region(server):
    import asyncio

    async def run():
        async with ropeserve.aio.Client(server.address) as client:
            region = ropeserve.CudaRegion("py-aio-cuda", HANDLE, 4096, device=0)
            with pytest.raises(ropeserve.FailedPrecondition, match="cuda_ipc_handle") as refused:
                await client.register_shm(region)
            assert "--backend=cuda" in refused.value.details
            assert await client.shm_status() == []
            with pytest.raises(ValueError, match="ipc_handle is 16 bytes"):
                await client.register_shm(ropeserve.CudaRegion("py-aio-cuda", bytes(16), 4096))

    asyncio.run(run())
