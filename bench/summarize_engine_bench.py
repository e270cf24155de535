#!/usr/bin/env python3
"""Summarises engine_bench JSON as markdown: ratios against baselines that were
measured in the same run (memcpy of the same bytes, sgemm of the same shapes,
torch doing the same rotations), since absolute speeds on shared machines are
noise.

  summarize_engine_bench.py ENGINE.json [--torch TORCH.json]

Also importable: rows() and metrics() are what compare_engine_bench.py
compares between two builds.
"""
import argparse
import json
import platform
import subprocess

PREFILL = "B:1/S:4096/Hq:32/Hkv:8/D:128"
DECODE = "B:32/S:1/Hq:32/Hkv:8/D:128"
F32, F16, BF16 = 1, 2, 3
INTER, HALF = 1, 2
DTYPE_NAMES = {F32: "float32", F16: "float16", BF16: "bfloat16"}

# (label, BM_Rotate args, target on the ratio to memcpy, torch path to compare)
ROTATE_ROWS = [
    ("prefill f32, interleaved", f"{PREFILL}/R:0/dtype:{F32}/layout:{INTER}/pos:0/threads:1", None, "llama_complex"),
    ("prefill f16, interleaved", f"{PREFILL}/R:0/dtype:{F16}/layout:{INTER}/pos:0/threads:1", 1.0, "llama_complex"),
    ("prefill bf16, interleaved", f"{PREFILL}/R:0/dtype:{BF16}/layout:{INTER}/pos:0/threads:1", 1.0, "llama_complex"),
    ("prefill f16, half", f"{PREFILL}/R:0/dtype:{F16}/layout:{HALF}/pos:0/threads:1", 1.0, "hf_rotate_half"),
    ("prefill bf16, half", f"{PREFILL}/R:0/dtype:{BF16}/layout:{HALF}/pos:0/threads:1", 1.0, "hf_rotate_half"),
    ("prefill bf16, half, rotary_dim 64", f"{PREFILL}/R:64/dtype:{BF16}/layout:{HALF}/pos:0/threads:1", None, None),
    ("decode f32, interleaved", f"{DECODE}/R:0/dtype:{F32}/layout:{INTER}/pos:0/threads:1", None, "llama_complex"),
    ("decode f16, interleaved", f"{DECODE}/R:0/dtype:{F16}/layout:{INTER}/pos:0/threads:1", None, "llama_complex"),
    ("decode bf16, interleaved", f"{DECODE}/R:0/dtype:{BF16}/layout:{INTER}/pos:0/threads:1", 0.5, "llama_complex"),
    ("decode bf16, half", f"{DECODE}/R:0/dtype:{BF16}/layout:{HALF}/pos:0/threads:1", 0.5, "hf_rotate_half"),
    ("decode bf16, half, explicit positions", f"{DECODE}/R:0/dtype:{BF16}/layout:{HALF}/pos:1/threads:1", 0.5, None),
    ("prefill f32, all threads", f"{PREFILL}/R:0/dtype:{F32}/layout:{INTER}/pos:0/threads:0", None, None),
    ("prefill bf16, all threads", f"{PREFILL}/R:0/dtype:{BF16}/layout:{INTER}/pos:0/threads:0", None, None),
]
ATTENTION_TARGETS = {1: 1.5, 2: 1.0}
# Target: a 64 MiB table (theta 500000, rotary_dim 128, 131072 rows) built in <= 20 ms.
TABLE_BUILD_TARGET_MS = 20


def find(benchmarks, name):
    """The median of a repeated benchmark, or its only run."""
    plain = None
    for b in benchmarks:
        if b.get("run_name", b.get("name")) != name:
            continue
        if b.get("aggregate_name") == "median":
            return b
        if b.get("run_type", "iteration") == "iteration" and plain is None:
            plain = b
    if plain is None:
        raise KeyError(name)
    return plain


def metrics(data):
    """{metric name: value} for every ratio this summary reports."""
    bm = data["benchmarks"]
    out = {}
    for label, args, _, _ in ROTATE_ROWS:
        try:
            r = find(bm, f"BM_Rotate/{args}/manual_time")
        except KeyError:
            continue
        out[f"rotate {label}: vs memcpy"] = r["vs_memcpy"]
        if "vs_memcpy_best" in r:  # older result files lack it
            out[f"rotate {label}: vs memcpy, best iterations"] = r["vs_memcpy_best"]
        out[f"rotate {label}: GB/s"] = r["bytes_per_second"] / 1e9
    for threads in (1, 2):
        try:
            a = find(bm, f"BM_AttentionScores/S:1024/threads:{threads}/manual_time")
            s = find(bm, f"BM_Sgemm/S:1024/threads:{threads}/manual_time")
        except KeyError:
            continue
        out[f"attention {threads} thread(s): vs full sgemm"] = s["real_time"] / a["real_time"]
    # Absolute, not a ratio (nothing in the run does the same work): ms, lower is faster.
    for threads, label in (("1", "1 thread"), ("0", "all threads")):
        try:
            b = find(bm, f"BM_TableBuild/threads:{threads}/real_time")
        except KeyError:
            continue
        out[f"table build, {label}: ms"] = b["real_time"]
    return out


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def target_cell(value, target):
    if target is None:
        return ""
    return f">= {target:.2f} {'met' if value >= target else 'MISSED'}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("engine_json")
    parser.add_argument("--torch", help="bench/torch_rope_bench.py output of the same run")
    args = parser.parse_args()
    data = json.load(open(args.engine_json))
    ctx, bm = data["context"], data["benchmarks"]
    torch_cases = {}
    torch_version = ""
    torch_allocator = ""
    if args.torch:
        t = json.load(open(args.torch))
        torch_version = t["torch"]
        torch_allocator = t.get("allocator", "default")  # older result files: default
        for c in t["cases"]:
            torch_cases[(c["name"], c["dtype"], c["path"])] = c
    reps = max([b.get("repetitions", 1) for b in bm] + [1])

    print("# Engine benchmark (CPU backend)\n")
    print(f"- date: {ctx['date']}")
    print(f"- machine: {cpu_model()}, {ctx['num_cpus']} CPUs; load average at start "
          f"{ctx.get('load_avg', [])}. The machine is shared with other jobs: only the ratios "
          "within this run mean anything.")
    if ctx.get("cpu_simd"):
        print(f"- CPU backend SIMD path: {ctx['cpu_simd']} (compiled: {ctx.get('cpu_simd_compiled', '')})")
    print(f"- medians of {reps} repetition(s); one-thread cases are timed with the thread's CPU "
          "clock, the others with the wall clock")
    if torch_version:
        print(f"- torch {torch_version} (Debian python3-torch) in-process, one thread, in the "
              "same session (bench/torch_rope_bench.py)")
        if torch_allocator == "warm":
            print("  with freed outputs kept in glibc's heap, so that torch pays no page faults "
                  "for its outputs after the first call (--allocator=warm)")
        else:
            print("  with glibc's default allocator: every large output is a fresh mapping, "
                  "page-faulted on each call (--allocator=default)")
    print()
    print("## Rotate (in place) vs memcpy of the same bytes\n")
    print("Each iteration rotates, then memcpys the same number of bytes (page-aligned buffers);")
    print("the ratio is the median over iterations of memcpy time / rotate time (`vs_memcpy`).")
    if torch_cases:
        print("`vs torch` is ropeserve's throughput over torch's doing the same rotation")
        print("(Llama's complex path for interleaved, transformers' rotate_half for half).")
    print()
    print("| case | rotate GB/s | ratio to memcpy | target | torch GB/s | vs torch |")
    print("|---|---|---|---|---|---|")
    for label, rargs, target, torch_path in ROTATE_ROWS:
        try:
            r = find(bm, f"BM_Rotate/{rargs}/manual_time")
        except KeyError:
            continue
        gbps = r["bytes_per_second"] / 1e9
        torch_gbps, vs_torch = "", ""
        if torch_path:
            shape = "prefill" if rargs.startswith(PREFILL) else "decode"
            dtype = DTYPE_NAMES[int(rargs.split("dtype:")[1].split("/")[0])]
            c = torch_cases.get((shape, dtype, torch_path))
            if c:
                torch_gbps = f"{c['gbps']:.2f} ({torch_path})"
                vs_torch = f"{gbps / c['gbps']:.1f}x"
        print(f"| {label} | {gbps:.2f} | {r['vs_memcpy']:.2f} | "
              f"{target_cell(r['vs_memcpy'], target)} | {torch_gbps} | {vs_torch} |")
    print("\nThe memcpy in the ratio is single-threaded, so 'all threads' ratios can exceed 1.\n")

    print("## Table build (theta 500000, rotary_dim 128, max_len 131072, 64 MiB)\n")
    print("| threads | ms | target |")
    print("|---|---|---|")
    for t in ("1", "0"):
        b = find(bm, f"BM_TableBuild/threads:{t}/real_time")
        verdict = "met" if b["real_time"] <= TABLE_BUILD_TARGET_MS else "MISSED"
        print(f"| {int(b['threads'])} | {b['real_time']:.1f} | <= {TABLE_BUILD_TARGET_MS} ms {verdict} |")

    print("\n## Attention scores q[1,1024,32,128], k[1,1024,8,128], causal softmax, vs sgemm\n")
    print("`vs full sgemm` is the time of OpenBLAS sgemm computing all 32 full 1024 x 1024 x 128")
    print("products (with as many OpenBLAS threads) over the engine's time for the whole call")
    print("(rotating q and k, the causal blocks' GEMMs, mask and softmax, writing every score).\n")
    print("| threads | sgemm ms (full product) | engine ms | vs full sgemm | target |")
    print("|---|---|---|---|---|")
    for threads in (1, 2):
        try:
            a = find(bm, f"BM_AttentionScores/S:1024/threads:{threads}/manual_time")
            s = find(bm, f"BM_Sgemm/S:1024/threads:{threads}/manual_time")
        except KeyError:
            continue
        ratio = s["real_time"] / a["real_time"]
        print(f"| {threads} | {s['real_time']:.1f} | {a['real_time']:.1f} | {ratio:.2f} | "
              f"{target_cell(ratio, ATTENTION_TARGETS[threads])} |")


if __name__ == "__main__":
    main()
