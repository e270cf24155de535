#!/usr/bin/env python3
"""Summarises axial_bench JSON as markdown: axial Rotate time over plain Rotate
time of the same bytes, measured interleaved in one run (the median over
iterations of each pair's ratio, then the median of the repetitions), against
the target of 1.2.

  summarize_axial_bench.py AXIAL.json
"""
import json
import platform
import subprocess
import sys

TARGET = 1.2
MODELS = {"0": "Flux.1 latent: 1 x 64 x 64 = 4096 tokens, 24 heads, head 128, axes 16/56/56",
          "1": "Wan 2.1 latent: 21 x 30 x 52 = 32760 tokens, 12 heads, head 128, axes 44/42/42"}


def machine():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        name = fields.get("Model name", "").strip()
        cpus = fields.get("CPU(s)", "").strip()
        flags = fields.get("Flags", "")
        simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
        return "%s, %s vCPUs, %s" % (name or platform.processor(), cpus, simd)
    except OSError:
        return platform.processor()


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        data = json.load(f)
    rows = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") not in (None, "median"):
            continue
        name = b["run_name"] if "run_name" in b else b["name"]
        parts = dict(p.split(":") for p in name.split("/")[1:] if ":" in p)
        rows[(parts["model"], parts["threads"])] = b
    print("# Axial RoPE vs plain Rotate of the same bytes (CPU backend)\n")
    print("Measured %s on %s; load average %s at the start. bfloat16, interleaved, q only;"
          % (data["context"]["date"], machine(), " ".join("%.2f" % x for x in
                                                          data["context"].get("load_avg", []))))
    repetitions = max((b.get("repetitions", 1) for b in data["benchmarks"]), default=1)
    print("tables warm. Each iteration rotates the plain config at start_pos 0, then the axial "
          "config at the latent's grid positions; the ratio is the median of the per-iteration "
          "ratios (median of %d repetitions). Target: <= %.1f.\n" % (repetitions, TARGET))
    print("| latent | threads | plain ms | axial ms | axial / plain | target |")
    print("|---|---|---|---|---|---|")
    verdicts = []
    for (model, threads), b in sorted(rows.items()):
        ratio = b["axial_vs_plain"]
        met = ratio <= TARGET
        verdicts.append(met)
        print("| %s | %s | %.2f | %.2f | %.3f | %s |" % (
            MODELS.get(model, model), int(b["threads"]), b["plain_ms"], b["axial_ms"], ratio,
            "met" if met else "missed"))
    print("\nplain ms and axial ms are each side's own median (per repetition, then over the "
          "repetitions); the ratio pairs the two calls of each iteration, which sets aside the "
          "iterations another job interrupted, so it is the figure to read on a shared machine.")
    print("\nOverall: %s (every case within %.1fx of a plain Rotate of the same bytes)."
          % ("met" if all(verdicts) else "missed", TARGET))
    print("\nThe axial call gathers each token's row from the axes' tables (one table of 16 and one "
          "of 56 features for Flux, whose height and width axes share it) in chunks of 4096 tokens "
          "into one reused 2 MiB buffer, still in cache when the kernels read it "
          "(docs/design.md, \"Per-request tables\").")


if __name__ == "__main__":
    main()
