"""Shared memory: tensors handed to ropeserve by reference (same host only).

    with ropeserve.SharedRegion("kv", 64 << 20) as region, ropeserve.Client(target) as client:
        client.register_shm(region)
        q = region.ndarray(np.float32, (1, 1024, 32, 128))      # a view: fill it in place
        q[...] = ...
        client.rotate_shm(q, config=config, start_pos=0)        # rotated in place, no bytes sent

A SharedRegion is a POSIX shared-memory object (multiprocessing.shared_memory)
that this process creates; register_shm asks the server to map it too.
Tensors are numpy arrays or torch tensors viewing the region (region.ndarray,
region.tensor); rotate_shm sends only their (region, offset, byte_size), and
the server rotates them in place or into `q_out` / `k_out` views. The bytes
are the caller's to leave alone while a call uses them.

Regions belong to the client identity that registered them (bearer token,
else mTLS subject, else the connection's peer address) and stay mapped on
the server until unregister_shm or the server stops; the object itself is
unlinked when the SharedRegion is closed.

A CudaRegion registers device memory instead, by its CUDA IPC handle (the
server needs --backend=cuda); rotate_shm then takes CUDA tensors viewing it
(torch CUDA tensors, or arrays with __cuda_array_interface__ such as cupy's)
and the server rotates them on the device.
"""

import os
import sys
from multiprocessing import shared_memory

import numpy as np

from . import _proto

pb = _proto.pb

_NUMPY_DTYPES = {np.dtype("float32"): pb.FLOAT32, np.dtype("float16"): pb.FLOAT16}

CUDA_IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)


class SharedRegion:
    """A POSIX shared-memory object of byte_size bytes, named `name` in references."""

    def __init__(self, name, byte_size):
        if not isinstance(name, str) or not name:
            raise ValueError("name is %r: expected a non-empty string" % (name,))
        if not isinstance(byte_size, int) or byte_size <= 0:
            raise ValueError("byte_size is %r: expected an int > 0" % (byte_size,))
        self.name = name
        self.byte_size = byte_size
        self._shm = shared_memory.SharedMemory(create=True, size=byte_size)
        # Allocated, not only sized: ropeserve refuses a sparse object (its
        # first touch of a hole would allocate the page in the server's memory).
        os.posix_fallocate(self._shm._fd, 0, byte_size)
        # A track=False object would not be unlinked by the resource tracker
        # at exit; the explicit close() below unlinks it.
        self.key = "/" + self._shm.name.lstrip("/")
        self._base = np.frombuffer(self._shm.buf, np.uint8).__array_interface__["data"][0]

    @property
    def buf(self):
        """The region's memoryview."""
        return self._shm.buf

    def ndarray(self, dtype, shape, offset=0):
        """A numpy array of dtype/shape viewing bytes from `offset` (no copy)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape)) if len(shape) else 1
        self._check(offset, count * dtype.itemsize, dtype.itemsize)
        return np.ndarray(shape, dtype=dtype, buffer=self._shm.buf, offset=offset)

    def tensor(self, dtype, shape, offset=0):
        """A torch CPU tensor of dtype/shape viewing bytes from `offset` (no copy)."""
        import torch
        itemsize = torch.empty((), dtype=dtype).element_size()
        count = 1
        for d in shape:
            count *= int(d)
        self._check(offset, count * itemsize, itemsize)
        return torch.frombuffer(self._shm.buf, dtype=dtype, count=count, offset=offset).view(*shape)

    def ref(self, tensor):
        """pb.SharedMemoryRef of a contiguous array/tensor that views this region."""
        address, nbytes = _address_and_size(tensor)
        offset = address - self._base
        if offset < 0 or offset + nbytes > self.byte_size:
            raise ValueError("the tensor does not lie inside region %r" % self.name)
        return pb.SharedMemoryRef(region=self.name, offset=offset, byte_size=nbytes)

    def contains(self, tensor):
        if _on_device(tensor):
            return False
        address, nbytes = _address_and_size(tensor)
        return self._base <= address and address + nbytes <= self._base + self.byte_size

    def register_request(self):
        return pb.RegisterSharedMemoryRequest(name=self.name, key=self.key, offset=0,
                                              byte_size=self.byte_size)

    def _check(self, offset, nbytes, alignment):
        if offset < 0 or offset + nbytes > self.byte_size or offset % alignment:
            raise ValueError("view [%d, +%d) of region %r (%d bytes) is outside it or not %d-byte aligned"
                             % (offset, nbytes, self.name, self.byte_size, alignment))

    def close(self):
        """Unmaps and unlinks the object (the server's mapping stays until unregistered)."""
        if self._shm is None:
            return
        shm, self._shm = self._shm, None
        try:
            shm.close()
        except BufferError:
            pass  # views are still alive: the mapping goes with them
        shm.unlink()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class CudaRegion:
    """A CUDA device allocation of this process, registered by its IPC handle (same host only;
    the server needs --backend=cuda, a CPU server answers FailedPrecondition).

        mem = cupy.cuda.Memory(64 << 20)                  # one cudaMalloc, not cupy's pool
        region = ropeserve.CudaRegion("kv", cupy.cuda.runtime.ipcGetMemHandle(mem.ptr), mem.size,
                                      device=0, base_address=mem.ptr)
        client.register_shm(region)
        q = cupy.ndarray((1, 1024, 32, 128), cupy.float16, cupy.cuda.MemoryPointer(mem, 0))
        ...                                               # fill q, then finish the writes:
        cupy.cuda.get_current_stream().synchronize()
        client.rotate_shm(q, config=config)              # rotated in place on the device

    name: the region's name in references.
    ipc_handle: the allocation's cudaIpcMemHandle_t as cudaIpcGetMemHandle exported it
        (bytes, exactly 64).
    byte_size: the region is the allocation's first byte_size bytes.
    device: the ordinal of the server's CUDA device the allocation lives on.
    base_address: the allocation's device address in this process (the region's byte 0).
        rotate_shm needs it to place tensors in the region; without it the region can be
        registered, but rotate_shm finds no tensor in it.

    The allocation is the caller's: keep it alive until the region is unregistered, and
    synchronize the stream that writes it before each call.
    """

    def __init__(self, name, ipc_handle, byte_size, device=0, *, base_address=None):
        if not isinstance(name, str) or not name:
            raise ValueError("name is %r: expected a non-empty string" % (name,))
        if not isinstance(ipc_handle, (bytes, bytearray)):
            raise TypeError("ipc_handle is a %s: expected the bytes of a cudaIpcMemHandle_t"
                            % type(ipc_handle).__name__)
        if len(ipc_handle) != CUDA_IPC_HANDLE_SIZE:
            raise ValueError("ipc_handle is %d bytes: a cudaIpcMemHandle_t is %d"
                             % (len(ipc_handle), CUDA_IPC_HANDLE_SIZE))
        if not _is_int(byte_size) or byte_size <= 0:
            raise ValueError("byte_size is %r: expected an int > 0" % (byte_size,))
        if not _is_int(device) or device < 0:
            raise ValueError("device is %r: expected a CUDA device ordinal >= 0" % (device,))
        if base_address is not None and (not _is_int(base_address) or base_address <= 0):
            raise ValueError("base_address is %r: expected a device address (an int > 0) or None"
                             % (base_address,))
        self.name = name
        self.ipc_handle = bytes(ipc_handle)
        self.byte_size = byte_size
        self.device = device
        self.base_address = base_address

    def ref(self, tensor):
        """pb.SharedMemoryRef of a contiguous CUDA tensor / array that views this region."""
        span = _device_address_and_size(tensor)
        if span is None:
            raise ValueError("CudaRegion %r holds CUDA tensors (torch, or with "
                             "__cuda_array_interface__), got a %s" % (self.name, type(tensor).__name__))
        if self.base_address is None:
            raise ValueError("CudaRegion %r was made without base_address: tensors cannot be "
                             "placed in it" % self.name)
        address, nbytes = span
        offset = address - self.base_address
        if offset < 0 or offset + nbytes > self.byte_size:
            raise ValueError("the tensor does not lie inside region %r" % self.name)
        return pb.SharedMemoryRef(region=self.name, offset=offset, byte_size=nbytes)

    def contains(self, tensor):
        span = _device_address_and_size(tensor)
        if span is None or self.base_address is None:
            return False
        address, nbytes = span
        return (self.base_address <= address
                and address + nbytes <= self.base_address + self.byte_size)

    def register_request(self):
        return pb.RegisterSharedMemoryRequest(name=self.name, cuda_ipc_handle=self.ipc_handle,
                                              cuda_device=self.device, byte_size=self.byte_size)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _on_device(tensor):
    """Whether `tensor` is device memory (a non-CPU torch tensor, or __cuda_array_interface__)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tensor, torch.Tensor):
        return tensor.device.type != "cpu"
    return _cuda_array_interface(tensor) is not None


def _cuda_array_interface(tensor):
    """__cuda_array_interface__ of a non-torch array, else None. (Torch tensors are read
    directly: theirs refuses bfloat16 and tensors that require grad.)"""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tensor, torch.Tensor):
        return None
    return getattr(tensor, "__cuda_array_interface__", None)


def _device_address_and_size(tensor):
    """(device address, bytes) of a contiguous CUDA tensor or array; None for anything else."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tensor, torch.Tensor):
        if tensor.device.type != "cuda":
            return None
        if not tensor.is_contiguous():
            raise ValueError("a CUDA tensor by reference must be contiguous")
        return tensor.data_ptr(), tensor.numel() * tensor.element_size()
    interface = _cuda_array_interface(tensor)
    if interface is None:
        return None
    shape = tuple(int(d) for d in interface["shape"])
    itemsize = np.dtype(interface["typestr"]).itemsize
    strides = interface.get("strides")
    if strides is not None:
        expected = itemsize
        for extent, stride in reversed(list(zip(shape, strides))):
            if extent > 1 and stride != expected:
                raise ValueError("a CUDA array by reference must be C-contiguous")
            expected *= extent
    count = 1
    for d in shape:
        count *= d
    return int(interface["data"][0]), count * itemsize


def _address_and_size(tensor):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tensor, torch.Tensor):
        if not tensor.is_contiguous() or tensor.device.type != "cpu":
            raise ValueError("a shared-memory tensor must be a contiguous CPU tensor")
        return tensor.data_ptr(), tensor.numel() * tensor.element_size()
    if isinstance(tensor, np.ndarray):
        if not tensor.flags.c_contiguous:
            raise ValueError("a shared-memory array must be C-contiguous")
        return tensor.__array_interface__["data"][0], tensor.nbytes
    raise TypeError("expected a numpy array or torch tensor viewing a SharedRegion, got %s"
                    % type(tensor).__name__)


def dtype_of(tensor):
    """The rope.v1 dtype of a numpy array or torch tensor."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tensor, torch.Tensor):
        table = {torch.float32: pb.FLOAT32, torch.float16: pb.FLOAT16, torch.bfloat16: pb.BFLOAT16}
        if tensor.dtype not in table:
            raise ValueError("dtype %s: expected float32, float16 or bfloat16" % tensor.dtype)
        return table[tensor.dtype]
    interface = _cuda_array_interface(tensor)
    dtype = np.dtype(interface["typestr"]) if interface is not None else tensor.dtype
    if dtype not in _NUMPY_DTYPES:
        raise ValueError("dtype %s: expected float32 or float16" % dtype)
    return _NUMPY_DTYPES[dtype]


def _shape_of(tensor):
    interface = _cuda_array_interface(tensor)
    return [int(d) for d in (interface["shape"] if interface is not None else tensor.shape)]


def reference_tensor(region, tensor):
    """pb.Tensor carrying `tensor` by reference into `region` (a SharedRegion or CudaRegion)."""
    return pb.Tensor(dtype=dtype_of(tensor), shape=_shape_of(tensor), shm=region.ref(tensor))
