#!/usr/bin/env python3
"""Summarises engine_bench JSON as markdown: ratios against baselines that were
measured in the same run (memcpy of the same bytes, sgemm of the same shapes),
since absolute speeds on shared machines are noise."""
import json
import platform
import subprocess
import sys


def median(benchmarks, name):
    for b in benchmarks:
        if b.get("run_name") == name and b.get("aggregate_name") == "median":
            return b
    raise KeyError(name)


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(path):
    data = json.load(open(path))
    ctx, bm = data["context"], data["benchmarks"]
    gb = lambda b: b["bytes_per_second"] / 1e9
    rot = lambda args: median(bm, f"BM_Rotate/{args}/manual_time")
    mem = lambda n: median(bm, f"BM_Memcpy/bytes:{n}/real_time")
    prefill = "B:1/S:4096/Hq:32/Hkv:8/D:128"
    f32_bytes, half_bytes, dec_bytes = 83886080, 41943040, 655360
    print("# Engine benchmark (CPU backend)\n")
    print(f"- date: {ctx['date']}")
    print(f"- machine: {cpu_model()}, {ctx['num_cpus']} CPUs, "
          f"{ctx['caches'][-1]['size'] // 1024} KiB L{ctx['caches'][-1]['level']}; "
          f"load average at start {ctx.get('load_avg', [])}")
    print(f"- build: {ctx['library_build_type']} Google Benchmark library "
          "(Debian ships a debug-built libbenchmark; our code is Release, -O3 hot loops)")
    print("- medians of 3 repetitions; every ratio compares two rows of this same run\n")
    print("## Rotate (in place) vs memcpy of the same bytes\n")
    print("Each iteration rotates, then memcpys the same number of bytes; the ratio is")
    print("rotate throughput / memcpy throughput over the same moments (`vs_memcpy`).\n")
    print("| case | rotate GB/s | ratio to memcpy | target |")
    print("|---|---|---|---|")
    rows = [
        ("prefill q[1,4096,32,128]+k[1,4096,8,128] f32, 1 thread", f"{prefill}/dtype:1/threads:1", ">= 0.70"),
        ("same, f16, 1 thread", f"{prefill}/dtype:2/threads:1", ""),
        ("same, bf16, 1 thread", f"{prefill}/dtype:3/threads:1", ""),
        ("decode q[32,1,32,128]+k[32,1,8,128] f32, 1 thread", "B:32/S:1/Hq:32/Hkv:8/D:128/dtype:1/threads:1", ""),
        ("decode, bf16, 1 thread", "B:32/S:1/Hq:32/Hkv:8/D:128/dtype:3/threads:1", ""),
        ("prefill f32, all threads", f"{prefill}/dtype:1/threads:0", ""),
        ("prefill bf16, all threads", f"{prefill}/dtype:3/threads:0", ""),
    ]
    for label, args, target in rows:
        r = rot(args)
        print(f"| {label} | {gb(r):.2f} | {r['vs_memcpy']:.2f} | {target} |")
    m = mem(f32_bytes)
    print(f"\nStand-alone memcpy row of the f32 prefill size in this run: {gb(m):.2f} GB/s.")
    print("The memcpy in the ratio is single-threaded, so 'all threads' ratios exceed 1.\n")
    print("## Table build (theta 500000, rotary_dim 128, max_len 131072, 64 MiB)\n")
    print("| threads | ms | target |")
    print("|---|---|---|")
    for t in ("1", "0"):
        b = median(bm, f"BM_TableBuild/threads:{t}/real_time")
        print(f"| {int(b['threads'])} | {b['real_time']:.1f} | <= 20 ms |")
    print("\n## Attention scores q[1,1024,32,128], k[1,1024,8,128], causal softmax, vs sgemm\n")
    sg = median(bm, "BM_Sgemm/S:1024/threads:1/real_time")
    print("| case | ms | GFLOP/s (2*Hq*Sq*Sk*D) | vs sgemm |")
    print("|---|---|---|---|")
    print(f"| OpenBLAS sgemm, same 32 products, 1 thread | {sg['real_time']:.1f} | {sg['GFLOPS'] / 1e0:.1f} | 1.00 |")
    for t in ("1", "0"):
        a = median(bm, f"BM_AttentionScores/S:1024/threads:{t}/real_time")
        print(f"| ropeserve engine, {int(a['threads'])} thread(s) | {a['real_time']:.1f} | "
              f"{a['GFLOPS']:.1f} | {a['GFLOPS'] / sg['GFLOPS']:.2f} |")
    print("\nThe engine's figure counts the full QK^T product although the causal mask lets it")
    print("skip about half of it; it also includes rotating q and k, the mask and the softmax.")


if __name__ == "__main__":
    main(sys.argv[1])
