"""Keeping freed memory for reuse: glibc malloc settings for prefill-size calls.

Each call with tensors of tens of MiB allocates and frees several buffers of
that size in this process: the request's bytes, grpcio's copy of them, and
grpcio's receive buffers (a bytearray grown slice by slice, then a bytes
copy). With glibc's default settings those buffers come from fresh pages
every call: buffers above the mmap threshold are mapped and unmapped, and
freed memory above the trim threshold at the top of the heap goes back to
the kernel, so the next call faults every page in again (zero-filled by the
kernel). For a 20 MiB Rotate that costs about as much as the copies
themselves (bench/results/python_client.md).

tune_malloc() raises both thresholds for the whole process, so such buffers
are reused. The first ropeserve.Client (or ropeserve.aio.Client) of a
process calls it, unless
  - the client is made with tune_malloc=False,
  - ROPESERVE_TUNE_MALLOC=0 is in the environment, or
  - glibc's own MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ variables are
    set (the process owner has chosen), e.g.

    MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=268435456 python3 app.py

The cost: up to trim_threshold bytes of freed memory stay in the process
instead of going back to the kernel. (ropeserve itself, the server, sets its
own malloc arena cap for the same kind of reason: docs/operations.md.)
"""

import ctypes
import ctypes.util
import os

# mallopt's parameter numbers (<malloc.h>).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# glibc refuses an mmap threshold above half its largest heap (64 MiB on
# 64-bit), so 32 MiB is the most that keeps buffers up to that size off mmap.
DEFAULT_MMAP_THRESHOLD = 32 << 20
DEFAULT_TRIM_THRESHOLD = 256 << 20


def _libc():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return None  # not glibc (musl has no mallopt thresholds to speak of)
    return libc


def tune_malloc(mmap_threshold=DEFAULT_MMAP_THRESHOLD, trim_threshold=DEFAULT_TRIM_THRESHOLD):
    """Sets glibc malloc's mmap and trim thresholds for this process (see the module doc).

    Returns True when both were set; False where the C library is not glibc or refused a
    value (the settings are then unchanged or partly set; nothing else happens).
    """
    for name, value in (("mmap_threshold", mmap_threshold), ("trim_threshold", trim_threshold)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
            raise ValueError("%s is %r: expected an int in (0, 2 GiB) (bytes; mallopt takes an "
                             "int)" % (name, value))
    libc = _libc()
    if libc is None:
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    ok = libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold) == 1
    ok = libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold) == 1 and ok
    return ok


_client_default_done = False


def tune_malloc_for_clients():
    """What a Client does on construction (see the module doc): tune_malloc() once per
    process, unless ROPESERVE_TUNE_MALLOC=0 or glibc's MALLOC_*_THRESHOLD_ variables are set.
    Returns whether the thresholds were set by this call."""
    global _client_default_done  # pylint: disable=global-statement
    if _client_default_done:
        return False
    _client_default_done = True
    if os.environ.get("ROPESERVE_TUNE_MALLOC", "1").strip() == "0":
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    return tune_malloc()
