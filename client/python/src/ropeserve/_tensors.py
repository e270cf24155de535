"""numpy arrays and torch CPU tensors to rope.v1 tensor bytes, and reply bytes back.

Inputs: numpy float32 / float16 arrays, torch float32 / float16 / bfloat16
CPU tensors. Checked here, before any call: a wrong type (TypeError), rank,
dtype or device (ValueError). Non-contiguous and big-endian inputs are made
contiguous little-endian (a copy); contiguous ones are sent from their own
memory.

Outputs come back as the kind of array that went in. Those of large replies
(see _wire.VIEW_MIN_BYTES) are views of the reply buffer (no copy) when
their bytes sit at an address aligned for the element type; otherwise one
aligned copy is made, because torch kernels and C extensions assume aligned
data. Small replies are parsed by protobuf, which copies their few bytes. numpy results are read-only (they view an
immutable bytes object; .copy() for a writable one). torch has no read-only
tensors: its results are writable, and the reply buffer they view belongs to
them alone. Results of one call share that buffer, so keeping one keeps the
whole reply alive: copy one you keep long while dropping the others.

torch is imported only when the caller passes a torch tensor.
"""

import math
import sys
import threading
import warnings

import numpy as np

from . import _proto
from .errors import DataLoss

pb = _proto.pb

# torch.frombuffer warns, once per process, that a bytes object is not
# writable. The reply buffer belongs to the results alone (see above), so the
# first view is made with UserWarnings silenced; that catch_warnings window is
# process-wide, hence once, under a lock. Later views do not warn anyway.
_first_view_lock = threading.Lock()
_first_view_done = False

_NUMPY_TO_PB = {np.dtype("float32"): pb.FLOAT32, np.dtype("float16"): pb.FLOAT16}
_PB_TO_NUMPY = {pb.FLOAT32: np.dtype("<f4"), pb.FLOAT16: np.dtype("<f2")}
_RANKS = "[B, S, H, D] (rank 4) or [S, H, D] (rank 3)"


def _torch():
    """The torch module if the caller has imported it, else None (never imports it)."""
    return sys.modules.get("torch")


_TORCH_TO_PB = {}  # filled on first use, so that torch is never imported here
_PB_TO_TORCH = {}
_ITEMSIZE = {pb.FLOAT32: 4, pb.FLOAT16: 2, pb.BFLOAT16: 2}


def _torch_maps(torch):
    if not _TORCH_TO_PB:
        _PB_TO_TORCH.update({pb.FLOAT32: torch.float32, pb.FLOAT16: torch.float16, pb.BFLOAT16: torch.bfloat16})
        _TORCH_TO_PB.update({t: d for d, t in _PB_TO_TORCH.items()})
    return _TORCH_TO_PB, _PB_TO_TORCH


def address_of(buffer):
    """Where a buffer's bytes start in memory."""
    return np.frombuffer(buffer, np.uint8).__array_interface__["data"][0] if len(buffer) else 0


class TensorIn:
    """A checked input: kind ("numpy" / "torch"), rope.v1 dtype, shape (tuple of ints), and
    its bytes: data, a C-contiguous buffer of nbytes bytes."""

    __slots__ = ("kind", "dtype", "shape", "data", "nbytes")

    def __init__(self, kind, dtype, shape, data, nbytes=0):
        self.kind = kind
        self.dtype = dtype
        self.shape = shape
        self.data = data
        self.nbytes = nbytes


def is_tensor(x):
    torch = _torch()
    return isinstance(x, np.ndarray) or (torch is not None and isinstance(x, torch.Tensor))


def encode(name, x, ranks=(3, 4)):
    """The TensorIn of argument `name`; TypeError / ValueError naming it when unusable."""
    if isinstance(x, np.ndarray):
        return _encode_numpy(name, x, ranks)
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        return _encode_torch(torch, name, x, ranks)
    raise TypeError("%s is a %s: expected a numpy.ndarray or a torch.Tensor"
                    % (name, type(x).__module__ + "." + type(x).__qualname__))


def _check_rank(name, shape, ranks):
    if len(shape) not in ranks:
        raise ValueError("%s has rank %d (shape %s): expected %s"
                         % (name, len(shape), list(shape), _RANKS if ranks == (3, 4) else
                            " or ".join("rank %d" % r for r in ranks)))


def _encode_numpy(name, x, ranks):
    dtype = _NUMPY_TO_PB.get(x.dtype.newbyteorder("="))
    if dtype is None:
        raise ValueError("%s has dtype %s: expected float32 or float16 (numpy has no bfloat16: pass a "
                         "torch.bfloat16 tensor)" % (name, x.dtype))
    _check_rank(name, x.shape, ranks)
    a = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<"))
    return TensorIn("numpy", dtype, a.shape, a, a.nbytes)


def _encode_torch(torch, name, x, ranks):
    if not x.is_cpu:
        raise ValueError("%s is on device %s: ropeserve takes CPU tensors (call .cpu() first)"
                         % (name, x.device))
    if x.layout != torch.strided:
        raise ValueError("%s has layout %s: expected a dense (strided) tensor" % (name, x.layout))
    dtype = _torch_maps(torch)[0].get(x.dtype)
    if dtype is None:
        raise ValueError("%s has dtype %s: expected torch.float32, torch.float16 or torch.bfloat16"
                         % (name, x.dtype))
    _check_rank(name, x.shape, ranks)
    if x.requires_grad:
        x = x.detach()
    if not x.is_contiguous():
        x = x.contiguous()
    # The numpy view shares x's memory and keeps x alive; numpy has no
    # bfloat16, so those bytes travel as int16.
    view = (x.view(torch.int16) if dtype == pb.BFLOAT16 else x).numpy()
    return TensorIn("torch", dtype, view.shape, view, view.nbytes)


def _positions_array(name, positions):
    torch = _torch()
    if torch is not None and isinstance(positions, torch.Tensor):
        positions = positions.detach().cpu().numpy()
    a = np.asarray(positions)
    if a.ndim not in (1, 2, 3):
        raise ValueError("%s has rank %d: expected [S] or [B, S] values (M-RoPE: [3, S] or "
                         "[3, B, S]; axial: [n_axes, S] or [n_axes, B, S])" % (name, a.ndim))
    return a


def position_fields(positions, name="positions", fractional_name="fractional_positions"):
    """{name: ints} for integer positions, {fractional_name: floats} for floating-point ones.

    A floating-point array (numpy or torch) goes as fractional positions,
    whatever its values: the server computes its cos and sin directly.
    """
    if positions is None:
        return {}
    a = _positions_array(name, positions)
    if a.size and a.dtype.kind == "f":
        return {fractional_name: [float(p) for p in a.reshape(-1)]}
    if a.size and a.dtype.kind not in "iu":
        raise ValueError("%s has dtype %s: expected integers, or floats for fractional positions"
                         % (name, a.dtype))
    return {name: [int(p) for p in a.reshape(-1)]}


def decode(name, field, like):
    """The reply tensor `field` as the kind of array `like` (a TensorIn) is."""
    itemsize = _ITEMSIZE.get(field.dtype)
    if itemsize is None:
        raise DataLoss("reply %s has dtype %d: not a dtype this client knows" % (name, field.dtype))
    if len(field.data) != math.prod(field.shape) * itemsize:
        raise DataLoss("reply %s has %d bytes for shape %s of %s" % (
            name, len(field.data), list(field.shape), pb.DType.Name(field.dtype)))
    address = field.address if field.address is not None else address_of(field.data)
    aligned = address % itemsize == 0
    if like.kind == "torch":
        torch = _torch()
        torch_dtype = _torch_maps(torch)[1][field.dtype]
        if not aligned:
            return torch.frombuffer(bytearray(field.data), dtype=torch_dtype).view(field.shape)
        return _torch_view(torch, field.data, torch_dtype).view(field.shape)
    dtype = _PB_TO_NUMPY.get(field.dtype)
    if dtype is None:
        raise DataLoss("reply %s is %s, which numpy cannot hold" % (name, pb.DType.Name(field.dtype)))
    array = np.frombuffer(field.data, dtype)
    if not aligned:
        array = array.copy()
        array.flags.writeable = False
    return array.reshape(field.shape)


def _torch_view(torch, data, dtype):
    global _first_view_done
    if _first_view_done:
        return torch.frombuffer(data, dtype=dtype)
    with _first_view_lock, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        view = torch.frombuffer(data, dtype=dtype)
        _first_view_done = True
    return view
