"""ropeserve.tune_malloc: glibc keeps prefill-size buffers for reuse instead of mapping fresh pages.

Checked through glibc's own accounting (mallinfo2), in fresh interpreters: with the package's
settings a 20 MiB buffer comes from the heap and stays there once freed; with the defaults it
is mmap'ed. The first Client of a process applies them unless told not to. No timing here
(bench/python_client_bench.py measures the effect).
"""

import os
import subprocess
import sys

import pytest

import ropeserve

# Allocates 20 MiB, reports glibc's mmap'ed bytes while it lives and its free heap bytes after.
PROBE = r"""
import ctypes, sys
import ropeserve

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
mode = sys.argv[1]
if mode == "tuned":
    assert ropeserve.tune_malloc() is True
elif mode == "client":
    ropeserve.Client("127.0.0.1:9").close()
elif mode == "aio client":
    ropeserve.aio.Client("127.0.0.1:9")
elif mode == "client without":
    ropeserve.Client("127.0.0.1:9", tune_malloc=False).close()
buffer = bytearray(20 << 20)
mapped = libc.mallinfo2().hblkhd
del buffer
print(mapped, libc.mallinfo2().fordblks)
"""


def probe(mode, env=None):
    result = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                            timeout=60, check=False, env=env)
    assert result.returncode == 0, result.stderr
    mapped, free_in_heap = (int(x) for x in result.stdout.split())
    return mapped, free_in_heap


def test_tuned_a_prefill_size_buffer_comes_from_the_heap_and_stays_there_once_freed():
    mapped, free_in_heap = probe("tuned")
    assert mapped < (20 << 20), "the 20 MiB buffer was still mmap'ed"
    assert free_in_heap >= (20 << 20), "the freed 20 MiB went back to the kernel"


def test_by_default_glibc_maps_it_afresh_which_is_what_tune_malloc_changes():
    mapped, _ = probe("default")
    assert mapped >= (20 << 20)


@pytest.mark.parametrize("mode", ["client", "aio client"])
def test_the_first_client_of_a_process_applies_it(mode):
    mapped, free_in_heap = probe(mode)
    assert mapped < (20 << 20) and free_in_heap >= (20 << 20)


def test_a_client_keeps_glibcs_defaults_when_told_or_when_the_process_chose_its_own():
    assert probe("client without")[0] >= (20 << 20)
    env = dict(os.environ, ROPESERVE_TUNE_MALLOC="0")
    assert probe("client", env)[0] >= (20 << 20)
    # glibc's own variable (here the default 128 KiB threshold, fixed): the client leaves it.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    assert probe("client", env)[0] >= (20 << 20)


def test_tune_malloc_refuses_values_mallopt_cannot_take():
    for bad in (0, -1, True, "32M", 2**31):
        with pytest.raises(ValueError, match="threshold"):
            ropeserve.tune_malloc(mmap_threshold=bad)
    with pytest.raises(ValueError, match="trim_threshold is 0"):
        ropeserve.tune_malloc(trim_threshold=0)
