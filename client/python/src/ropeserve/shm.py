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
"""

import sys
from multiprocessing import shared_memory

import numpy as np

from . import _proto

pb = _proto.pb

_NUMPY_DTYPES = {np.dtype("float32"): pb.FLOAT32, np.dtype("float16"): pb.FLOAT16}


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
    if tensor.dtype not in _NUMPY_DTYPES:
        raise ValueError("dtype %s: expected float32 or float16" % tensor.dtype)
    return _NUMPY_DTYPES[tensor.dtype]


def reference_tensor(region, tensor):
    """pb.Tensor carrying `tensor` by reference into `region`."""
    return pb.Tensor(dtype=dtype_of(tensor), shape=list(tensor.shape), shm=region.ref(tensor))
