"""glibc's mallopt, for the Python baselines the benchmarks compare ropeserve
with (bench/torch_rope_bench.py, bench/torch_server/torch_rope_server.py):
so that their figures measure torch, not the machine's page-fault cost. A
page fault per 4 KiB of every fresh buffer costs about 14 us on the
Firecracker VMs these benchmarks run on (under 1 us on bare metal).
"""

import ctypes
import ctypes.util

# mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
M_ARENA_MAX = -8


def mallopt(settings):
    """Applies {parameter: value} in order; False as soon as glibc refuses
    one (or this is not glibc)."""
    path = ctypes.util.find_library("c")
    if path is None:
        return False
    libc = ctypes.CDLL(path)
    return all(libc.mallopt(param, value) == 1 for param, value in settings.items())
