#!/usr/bin/python3
"""Summarizes bench/compare_service_bench.sh: per round and server, each
case's Rotate (or RotateStream) calls/s over Echo's with the same payload
and calls in flight, then the medians over the rounds.

Usage: summarize_before_after.py WORKDIR ROUNDS OUT_JSON LABEL > OUT_MD
"""

import json
import os
import platform
import statistics
import sys


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def simd():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith("flags")), "").split()
    except OSError:
        return ""
    if "avx512f" in flags:
        return ", AVX-512"
    return ", AVX2, no AVX-512" if "avx2" in flags else ", no AVX2"


def ratios(run):
    """{case: Rotate calls/s / Echo calls/s} of one service_bench run."""
    echo = {(c["payload_bytes"], c["concurrency"]): c["calls_per_s"]
            for c in run["cases"] if c["name"].startswith("Echo/")}
    out = {}
    for c in run["cases"]:
        if c["name"].startswith("Echo/"):
            continue
        base = echo.get((c["payload_bytes"], c["concurrency"]))
        if base:
            out["%s x%d" % (c["name"], c["concurrency"])] = c["calls_per_s"] / base
    return out


def main():
    work, rounds, out_json, label = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    runs = {"before": [], "after": []}
    for r in range(1, rounds + 1):
        for server in runs:
            with open(os.path.join(work, "%s.%d.json" % (server, r))) as f:
                runs[server].append(json.load(f))
    per_round = {s: [ratios(run) for run in runs[s]] for s in runs}
    cases = sorted(per_round["after"][0])
    median = {s: {c: statistics.median(rr[c] for rr in per_round[s]) for c in cases}
              for s in runs}
    with open(out_json, "w") as f:
        json.dump({"label": label, "rounds": rounds, "runs": runs, "median_ratio": median}, f,
                  indent=1)
    cores = os.cpu_count()
    load = os.getloadavg()[0]
    print("# service_bench before/after: %s" % label)
    print()
    print("Machine: %d vCPUs of %s%s, shared with other jobs (load average %.1f at"
          " the end): server, client and the other jobs share the cores, so only"
          " ratios within one round mean anything. Two servers side by side"
          " (before, after), `bench/compare_service_bench.sh`, %d alternating"
          " rounds of 1 s per case; each figure is Rotate's calls/s over Echo's"
          " on the same server in the same round (1.00: Rotate costs what the"
          " transport does), the median over the rounds; `xN`: calls in flight."
          % (cores, cpu_model(), simd(), load, rounds))
    print()
    print("| case | before | after | after / before |")
    print("|---|---|---|---|")
    for c in cases:
        b, a = median["before"][c], median["after"][c]
        print("| %s | %.3f | %.3f | %.3f |" % (c, b, a, a / b))
    print()
    print("Per round (before / after):")
    print()
    for c in cases:
        print("- %s: %s" % (c, ", ".join(
            "%.3f / %.3f" % (per_round["before"][r][c], per_round["after"][r][c])
            for r in range(rounds))))


if __name__ == "__main__":
    main()
