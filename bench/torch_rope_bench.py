#!/usr/bin/python3
"""torch doing the rotations of bench/engine_bench.cc in-process, for the
ratio ropeserve / torch measured in the same run (bench/run_engine_bench.sh).

Two ways users rotate with torch:
  * llama_complex: Meta Llama's official apply_rotary_emb (INTERLEAVED pairs):
    view_as_complex(x.float()) * freqs_cis, view_as_real, flatten, type_as.
  * hf_rotate_half: Hugging Face transformers' apply_rotary_pos_emb (HALF
    pairs): q * cos + rotate_half(q) * sin, with cos/sin cast to the model's
    dtype as transformers does, on [B, S, H, D] with unsqueeze_dim=2.
Tables (freqs_cis, cos/sin) are built before timing, as ropeserve caches its
own. Each case also times a copy of the same bytes (Tensor.copy_), so that
torch's figures have their own memcpy ratio.

One-thread cases set torch.set_num_threads(1) and time with the thread's CPU
clock (time.thread_time), as engine_bench does; the machine is shared.

torch allocates every output; glibc serves blocks of 32 MiB and more with a
fresh mapping each time, so each call pays a page fault per 4 KiB of output.
That costs about 14 us a page on the Firecracker VMs these benchmarks run
on (a prefill output of 84 MB: 250 ms of faults, 50 times the arithmetic),
under a microsecond on bare metal. With --allocator=warm (the default)
glibc is told to keep freed memory in its heap (mallopt M_MMAP_MAX = 0,
M_TRIM_THRESHOLD = 2^31 - 1), so that after the warm-up call torch's figures
are its arithmetic and memory traffic, not the machine's fault cost: the
comparison most favourable to torch. --allocator=default measures a plain
process.

Writes JSON to --out: {"cases": [{name, path, dtype, shape, threads,
seconds (median), bytes, gbps, vs_copy}], "torch": version, "allocator":
warm or default}.
"""

import argparse
import json
import statistics
import sys
import time

import torch

import glibc_malloc  # bench/, this script's directory

THETA = 500000.0
PREFILL = (1, 4096, 32, 8, 128)  # B, S, Hq, Hkv, D
DECODE = (32, 1, 32, 8, 128)
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def llama_freqs_cis(dim, positions):
    """freqs_cis as Llama's precompute_freqs_cis, for the given positions
    (computed in float64 here; the timing does not depend on it)."""
    inv_freq = 1.0 / (THETA ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = torch.outer(positions.to(torch.float64), inv_freq)
    return torch.polar(torch.ones_like(angles), angles).to(torch.complex64)


def llama_apply_rotary_emb(xq, xk, freqs_cis):
    """Meta Llama's model.py apply_rotary_emb, as published."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    freqs = freqs_cis.view(*shape)
    xq_out = torch.view_as_real(xq_ * freqs).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def hf_cos_sin(dim, positions, dtype):
    """transformers' LlamaRotaryEmbedding: cos/sin of cat(freqs, freqs), in
    float32, then cast to the activations' dtype."""
    inv_freq = 1.0 / (THETA ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2):
    """transformers' apply_rotary_pos_emb (unsqueeze_dim=2: q is [B, S, H, D])."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def clock(one_thread):
    return time.thread_time if one_thread else time.perf_counter


def measure(fn, copy_fn, one_thread, min_seconds):
    """Median seconds of fn and of copy_fn, called alternately."""
    now = clock(one_thread)
    fn()
    copy_fn()  # warm-up
    runs, copies = [], []
    start = time.perf_counter()
    while time.perf_counter() - start < min_seconds or len(runs) < 5:
        t0 = now()
        fn()
        t1 = now()
        copy_fn()
        t2 = now()
        runs.append(t1 - t0)
        copies.append(t2 - t1)
    return statistics.median(runs), statistics.median(copies)


def case(name, shape, dtype_name, path, threads, min_seconds):
    b, s, hq, hkv, d = shape
    dtype = DTYPES[dtype_name]
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(b, s, hq, d, generator=gen).to(dtype)
    k = torch.randn(b, s, hkv, d, generator=gen).to(dtype)
    # engine_bench's positions: 0..S-1 for prefill, 0 for every decode row.
    positions = torch.arange(s)
    if path == "llama_complex":
        freqs = llama_freqs_cis(d, positions)
        fn = lambda: llama_apply_rotary_emb(q, k, freqs)
    else:
        cos, sin = hf_cos_sin(d, positions, dtype)
        cos = cos.unsqueeze(0).expand(b, s, d)
        sin = sin.unsqueeze(0).expand(b, s, d)
        fn = lambda: hf_apply_rotary_pos_emb(q, k, cos, sin)
    nbytes = q.numel() * q.element_size() + k.numel() * k.element_size()
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.zeros(nbytes, dtype=torch.uint8)
    seconds, copy_seconds = measure(fn, lambda: dst.copy_(src), threads == 1, min_seconds)
    return {"name": name, "path": path, "dtype": dtype_name, "shape": list(shape),
            "threads": threads, "seconds": seconds, "bytes": nbytes,
            "gbps": nbytes / seconds / 1e9, "copy_seconds": copy_seconds,
            "vs_copy": copy_seconds / seconds}


def keep_freed_memory_in_heap():
    """glibc: no mapping per large block, and no trimming of the heap's top,
    so a freed output's pages serve the next call without faulting again."""
    if not glibc_malloc.mallopt({glibc_malloc.M_MMAP_MAX: 0,
                                 glibc_malloc.M_TRIM_THRESHOLD: 2**31 - 1}):
        sys.exit("torch_rope_bench.py: mallopt failed (not glibc?); use --allocator=default")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--min_seconds", type=float, default=1.0)
    parser.add_argument("--allocator", choices=("warm", "default"), default="warm",
                        help="warm: freed outputs stay in glibc's heap (see above)")
    args = parser.parse_args()
    if args.allocator == "warm":
        keep_freed_memory_in_heap()
    cases = []
    torch.set_num_threads(1)
    for name, shape in (("prefill", PREFILL), ("decode", DECODE)):
        for dtype in ("float32", "float16", "bfloat16"):
            for path in ("llama_complex", "hf_rotate_half"):
                cases.append(case(name, shape, dtype, path, 1, args.min_seconds))
                print(f"{name} {dtype} {path}: {cases[-1]['gbps']:.2f} GB/s", file=sys.stderr)
    json.dump({"torch": torch.__version__, "allocator": args.allocator, "cases": cases},
              open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
