"""numpy arrays and torch CPU tensors to rope.v1 tensor bytes, and reply bytes back.

Inputs: numpy float32 / float16 arrays, torch float32 / float16 / bfloat16
CPU tensors, sent in their own dtype unless the caller names another
(`dtype`). Converted, with the rule of ropectl's .npy inputs:
  - float64 (numpy's default; torch's double) is sent as float32, or as
    `dtype`, rounding once to nearest even (ropeserve computes in float32;
    float64 has no wire dtype);
  - a float input with another `dtype` is rounded once to nearest even;
  - numpy int16 / uint16 arrays hold raw bfloat16 bits (numpy has no
    bfloat16), and need dtype="bfloat16" (ropectl's '<i2' / '<u2' files with
    --dtype=bfloat16);
  - any other dtype is refused.
Checked here, before any call: a wrong type (TypeError), rank, dtype or
device (ValueError). Non-contiguous and big-endian inputs are made
contiguous little-endian (a copy); contiguous ones are sent from their own
memory.

Results have the wire dtype: float32 for a float64 input, and for numpy a
bfloat16 result is a uint16 array of its raw bits (int16 when the input was
int16).

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
# INT32 is a reply-only type (AttentionScores' top_k_indices): decoded, never sent.
if hasattr(pb, "INT32"):
    _PB_TO_NUMPY[pb.INT32] = np.dtype("<i4")
_RANKS = "[B, S, H, D] (rank 4) or [S, H, D] (rank 3)"


def _torch():
    """The torch module if the caller has imported it, else None (never imports it)."""
    return sys.modules.get("torch")


_TORCH_TO_PB = {}  # filled on first use, so that torch is never imported here
_PB_TO_TORCH = {}
_ITEMSIZE = {pb.FLOAT32: 4, pb.FLOAT16: 2, pb.BFLOAT16: 2}
if hasattr(pb, "INT32"):
    _ITEMSIZE[pb.INT32] = 4


def _torch_maps(torch):
    if not _TORCH_TO_PB:
        _PB_TO_TORCH.update({pb.FLOAT32: torch.float32, pb.FLOAT16: torch.float16, pb.BFLOAT16: torch.bfloat16})
        _TORCH_TO_PB.update({t: d for d, t in _PB_TO_TORCH.items()})
        if hasattr(pb, "INT32"):
            _PB_TO_TORCH[pb.INT32] = torch.int32  # decoded only (not in _TORCH_TO_PB)
    return _TORCH_TO_PB, _PB_TO_TORCH


def address_of(buffer):
    """Where a buffer's bytes start in memory."""
    return np.frombuffer(buffer, np.uint8).__array_interface__["data"][0] if len(buffer) else 0


class TensorIn:
    """A checked input: kind ("numpy" / "torch"), rope.v1 dtype, shape (tuple of ints), and
    its bytes: data, a C-contiguous buffer of nbytes bytes. bits_dtype: for numpy, the
    integer dtype a bfloat16 result comes back as (uint16 unless the input was int16)."""

    __slots__ = ("kind", "dtype", "shape", "data", "nbytes", "bits_dtype")

    def __init__(self, kind, dtype, shape, data, nbytes=0, bits_dtype=np.dtype("<u2")):
        self.kind = kind
        self.dtype = dtype
        self.shape = shape
        self.data = data
        self.nbytes = nbytes
        self.bits_dtype = bits_dtype


_DTYPE_NAMES = {"float32": pb.FLOAT32, "float16": pb.FLOAT16, "bfloat16": pb.BFLOAT16}


def wire_dtype(dtype):
    """The rope.v1 DType of a `dtype` argument: None, "float32" / "float16" / "bfloat16", a
    numpy or torch dtype of those, or a rope.v1 DType number; ValueError otherwise."""
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype.lower() in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype.lower()]
    if isinstance(dtype, int) and not isinstance(dtype, bool) and dtype in _DTYPE_NAMES.values():
        return dtype
    name = str(dtype).replace("torch.", "")
    if name in _DTYPE_NAMES:
        return _DTYPE_NAMES[name]
    raise ValueError("dtype is %r: expected None, 'float32', 'float16' or 'bfloat16'" % (dtype,))


def _round_to_odd_float32(d):
    """float64 -> float32 rounding to odd (inexact results keep a sticky low bit), so that
    a second rounding to float16 / bfloat16 is the single correct rounding of d (as
    ropectl's NarrowFloat64)."""
    f = d.astype(np.float32)
    back = f.astype(np.float64)
    inexact = (back != d) & ~np.isnan(d)
    if inexact.any():
        over = inexact & (np.abs(back) > np.abs(d))
        f[over] = np.nextafter(f[over], np.float32(0))
        bits = f.view(np.uint32)
        bits[inexact] |= np.uint32(1)
    return f


def _bfloat16_bits(f32):
    """float32 -> bfloat16 bits, rounding to nearest even (NaN stays NaN)."""
    u = f32.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f32)
    if nan.any():
        bits[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return bits


def _convert_float_array(name, a, dtype):
    """A C-contiguous little-endian array of float `a` in wire dtype `dtype` (numpy's int16
    view for bfloat16)."""
    if a.dtype == np.float64 and dtype != pb.FLOAT32:
        a = _round_to_odd_float32(a)
    if dtype == pb.FLOAT32:
        return np.ascontiguousarray(a, dtype="<f4")
    if dtype == pb.FLOAT16:
        return np.ascontiguousarray(a, dtype="<f2")
    return _bfloat16_bits(np.ascontiguousarray(a, dtype=np.float32)).view("<i2")


def is_tensor(x):
    torch = _torch()
    return isinstance(x, np.ndarray) or (torch is not None and isinstance(x, torch.Tensor))


def encode(name, x, ranks=(3, 4), dtype=None):
    """The TensorIn of argument `name`, sent as wire dtype `dtype` (a rope.v1 DType; None:
    the input's own, float32 for float64); TypeError / ValueError naming it when unusable."""
    if isinstance(x, np.ndarray):
        return _encode_numpy(name, x, ranks, dtype)
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        return _encode_torch(torch, name, x, ranks, dtype)
    raise TypeError("%s is a %s: expected a numpy.ndarray or a torch.Tensor"
                    % (name, type(x).__module__ + "." + type(x).__qualname__))


def _check_rank(name, shape, ranks):
    if len(shape) not in ranks:
        raise ValueError("%s has rank %d (shape %s): expected %s"
                         % (name, len(shape), list(shape), _RANKS if ranks == (3, 4) else
                            " or ".join("rank %d" % r for r in ranks)))


def _encode_numpy(name, x, ranks, wanted=None):
    native = x.dtype.newbyteorder("=")
    _check_rank(name, x.shape, ranks)
    if native in (np.dtype("int16"), np.dtype("uint16")):
        if wanted != pb.BFLOAT16:
            raise ValueError("%s has dtype %s: integer arrays are raw bfloat16 bits and need "
                             "dtype='bfloat16' (as ropectl's --dtype=bfloat16)" % (name, x.dtype))
        a = np.ascontiguousarray(x, dtype=native.newbyteorder("<"))
        return TensorIn("numpy", pb.BFLOAT16, a.shape, a, a.nbytes, bits_dtype=a.dtype)
    dtype = _NUMPY_TO_PB.get(native)
    if dtype is None and native != np.dtype("float64"):
        raise ValueError("%s has dtype %s: expected float32, float16 or float64 (sent as float32), "
                         "or int16 / uint16 bfloat16 bits with dtype='bfloat16' (numpy has no "
                         "bfloat16)" % (name, x.dtype))
    target = wanted if wanted is not None else (dtype if dtype is not None else pb.FLOAT32)
    if target == dtype:
        a = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<"))
    else:
        a = _convert_float_array(name, np.asarray(x, dtype=native), target)
    return TensorIn("numpy", target, a.shape, a, a.nbytes)


def _encode_torch(torch, name, x, ranks, wanted=None):
    if not x.is_cpu:
        raise ValueError("%s is on device %s: ropeserve takes CPU tensors (call .cpu() first)"
                         % (name, x.device))
    if x.layout != torch.strided:
        raise ValueError("%s has layout %s: expected a dense (strided) tensor" % (name, x.layout))
    dtype = _torch_maps(torch)[0].get(x.dtype)
    if dtype is None and x.dtype != torch.float64:
        raise ValueError("%s has dtype %s: expected torch.float32, torch.float16, torch.bfloat16 or "
                         "torch.float64 (sent as float32)" % (name, x.dtype))
    _check_rank(name, x.shape, ranks)
    if x.requires_grad:
        x = x.detach()
    target = wanted if wanted is not None else (dtype if dtype is not None else pb.FLOAT32)
    if target != dtype:
        if x.dtype == torch.float64:
            # torch narrows float64 to 16 bits through float32 (two roundings): round once here.
            a = _convert_float_array(name, x.contiguous().numpy(), target)
            return TensorIn("torch", target, a.shape, a, a.nbytes)
        x = x.to(_torch_maps(torch)[1][target])
        dtype = target
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
    if dtype is None and field.dtype == pb.BFLOAT16:
        dtype = like.bits_dtype  # numpy has no bfloat16: the raw bits
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
