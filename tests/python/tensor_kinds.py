"""The tensor kinds the client accepts, for parameterized tests: make one, read one back."""

import numpy as np
import torch

# (kind, dtype name) pairs: every dtype the client takes, per framework.
KINDS = [("numpy", "float32"), ("numpy", "float16"),
         ("torch", "float32"), ("torch", "float16"), ("torch", "bfloat16")]
KIND_IDS = ["%s-%s" % k for k in KINDS]

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make(kind, dtype, values):
    """float64 `values` stored as kind/dtype (rounded to nearest even)."""
    if kind == "numpy":
        return np.asarray(values).astype(dtype)
    return torch.from_numpy(np.asarray(values, dtype=np.float32)).to(_TORCH_DTYPES[dtype])


def as_float64(x):
    """The values of a numpy array or torch tensor, as a float64 numpy array."""
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def check_kind(x, kind, dtype, shape):
    """x is a kind/dtype array of the given shape."""
    if kind == "numpy":
        assert isinstance(x, np.ndarray), type(x)
        assert x.dtype == np.dtype(dtype), x.dtype
    else:
        assert isinstance(x, torch.Tensor), type(x)
        assert x.dtype == _TORCH_DTYPES[dtype], x.dtype
    assert tuple(x.shape) == tuple(shape), (tuple(x.shape), shape)
