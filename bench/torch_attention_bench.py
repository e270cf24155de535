#!/usr/bin/python3
"""torch doing bench/attention_bench.cc's causal prefill in-process, for the
ratio ropeserve / torch measured in the same run
(bench/run_attention_compare.sh).

The same case as attention_bench's prefill: Sq = Sk = --len, Hq 32, Hkv 8,
D 128, causal, RoPE (interleaved pairs, theta 10000) applied to q and k
inside, OUTPUT and LSE, inputs uniform in [-1, 1), float32 or bfloat16.
Debian's torch 1.13 has no scaled_dot_product_attention, so this is the
eager matmul-softmax-matmul users write without it, by chunks of query rows
so that the scores of one chunk (4 query heads of a key/value head x
--chunk rows x the keys it can see) stay small: per chunk, scores = q k^T *
scale, the causal part of the diagonal block set to -inf, lse =
logsumexp(scores), P = exp(scores - lse), output = P v. The rotation tables
are built before timing (ropeserve caches its own). bfloat16 runs torch's
bfloat16 matmuls on the bfloat16 tensors, as a model in bfloat16 would.

The FLOP rate counts what attention_bench counts: 2 (D + Dv) per unmasked
(query, key) pair, Sq (Sq + 1) / 2 * Hq pairs; torch also multiplies the
masked half of each diagonal block (a chunk's work is over all keys up to
its last row), which costs it time but is not counted.

One-thread cases set torch.set_num_threads(1) and time with the process's
CPU clock (time.process_time), as attention_bench does; cases on all
threads use the wall clock. The best of --repeats runs.

Writes JSON to --out: {"torch": version, "len": S, "rows": [{dtype,
threads, clock, seconds, gflops}]}.
"""

import argparse
import json
import math
import os
import time

import torch

HQ, HKV, D = 32, 8, 128
THETA = 10000.0


def rope_tables(seq, dim):
    """cos and sin [seq, dim / 2] in float32 (interleaved pairs)."""
    inv_freq = 1.0 / (THETA ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    return torch.cos(angles).float(), torch.sin(angles).float()


def rotate(x, cos, sin):
    """Interleaved RoPE on x [S, H, D]: pairs (2i, 2i + 1) rotated by angle
    position * inv_freq[i]; computed in float32, returned in x's dtype."""
    xf = x.float().reshape(x.shape[0], x.shape[1], -1, 2)
    a, b = xf[..., 0], xf[..., 1]
    c, s = cos[:, None, :], sin[:, None, :]
    out = torch.stack((a * c - b * s, a * s + b * c), dim=-1)
    return out.reshape(x.shape).to(x.dtype)


def attention(q, k, v, cos, sin, chunk):
    """Causal GQA attention with RoPE: output [S, Hq, D] and lse [Hq, S]."""
    s = q.shape[0]
    group = HQ // HKV
    scale = 1.0 / math.sqrt(D)
    qr = rotate(q, cos, sin)
    kr = rotate(k, cos, sin)
    # [Hkv, group, S, D] and [Hkv, S, D]
    qh = qr.permute(1, 0, 2).reshape(HKV, group, s, D)
    kh = kr.permute(1, 0, 2)
    vh = v.permute(1, 0, 2)
    output = torch.empty((HKV, group, s, D), dtype=q.dtype)
    lse = torch.empty((HKV, group, s), dtype=torch.float32)
    for start in range(0, s, chunk):
        end = min(s, start + chunk)
        scores = torch.matmul(qh[:, :, start:end], kh[:, None, :end].transpose(-1, -2)) * scale
        rows = torch.arange(start, end)[:, None]
        cols = torch.arange(end)[None, :]
        scores = scores.masked_fill(cols > rows, float("-inf"))
        row_lse = torch.logsumexp(scores.float(), dim=-1)
        probs = torch.exp(scores.float() - row_lse[..., None]).to(q.dtype)
        output[:, :, start:end] = torch.matmul(probs, vh[:, None, :end])
        lse[:, :, start:end] = row_lse
    return output.reshape(HQ, s, D).permute(1, 0, 2), lse.reshape(HQ, s)


def best_of(repeats, cpu_clock, f):
    clock = time.process_time if cpu_clock else time.perf_counter
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        f()
        best = min(best, clock() - t0)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--len", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    s = args.len
    cos, sin = rope_tables(s, D)
    gen = torch.Generator().manual_seed(7)
    rows = []
    for threads in (1, os.cpu_count() or 1):
        torch.set_num_threads(threads)
        for name in args.dtypes.split(","):
            dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]
            q = (torch.rand((s, HQ, D), generator=gen) * 2 - 1).to(dtype)
            k = (torch.rand((s, HKV, D), generator=gen) * 2 - 1).to(dtype)
            v = (torch.rand((s, HKV, D), generator=gen) * 2 - 1).to(dtype)
            with torch.no_grad():
                seconds = best_of(args.repeats, threads == 1,
                                  lambda: attention(q, k, v, cos, sin, args.chunk))
            pairs = s * (s + 1) / 2 * HQ
            gflops = pairs * 2 * (D + D) / seconds / 1e9
            rows.append({"dtype": name, "threads": threads,
                         "clock": "cpu" if threads == 1 else "wall",
                         "seconds": seconds, "gflops": gflops})
            print("torch prefill %s threads %d: %.3f s, %.1f GFLOP/s" % (name, threads, seconds,
                                                                         gflops), flush=True)
    with open(args.out, "w") as f:
        json.dump({"torch": torch.__version__, "len": s, "chunk": args.chunk, "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    main()
