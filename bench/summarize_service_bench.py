#!/usr/bin/env python3
"""Markdown summary of service_bench JSON: Rotate against Echo of the same
bytes, measured in the same run against the same server."""
import json
import subprocess
import sys
import time


def main(path):
    data = json.load(open(path))
    cases = {(c["name"], c["concurrency"]): c for c in data["cases"]}
    try:
        model = next(l.split(":", 1)[1].strip() for l in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if l.startswith("Model name:"))
    except (OSError, StopIteration):
        model = "unknown CPU"
    print("# Service benchmark: Rotate vs Echo (same bytes, same server)\n")
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"- machine: {model}; server (ropeserve --backend=cpu) and client share its cores over 127.0.0.1")
    print("- payload: float32 q [1,S,32,128] (Rotate, theta 500000) or the same bytes (Echo)\n")
    print("| case | in flight | calls | calls/s | MB/s | p50 us | p99 us | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for c in data["cases"]:
        print(f"| {c['name']} | {c['concurrency']} | {c['calls']} | {c['calls_per_s']:.0f} | "
              f"{c['mb_per_s']:.1f} | {c['p50_us']:.0f} | {c['p99_us']:.0f} | {c['errors']} |")
    print("\n## Ratios\n")
    print("| ratio | value | target |")
    print("|---|---|---|")
    concs = sorted({c["concurrency"] for c in data["cases"]})
    for size in ("16KiB", "4MiB", "64MiB"):
        for conc in concs:
            e, r = cases.get((f"Echo/{size}", conc)), cases.get((f"Rotate/{size}", conc))
            if e and r:
                target = ">= 0.85" if size == "4MiB" else ""
                print(f"| Rotate/Echo throughput, {size}, {conc} in flight | "
                      f"{r['calls_per_s'] / e['calls_per_s']:.2f} | {target} |")
    e, r = cases.get(("Echo/16KiB", 1)), cases.get(("Rotate/16KiB", 1))
    if e and r:
        print(f"| Rotate/Echo p50 latency, 16KiB, sequential | {r['p50_us'] / e['p50_us']:.2f} | <= 1.3 |")
    s = cases.get(("RotateStream/16KiB", 1))
    if s and r:
        print(f"| RotateStream/unary Rotate throughput, 16KiB, sequential | "
              f"{s['calls_per_s'] / r['calls_per_s']:.2f} | |")


if __name__ == "__main__":
    main(sys.argv[1])
