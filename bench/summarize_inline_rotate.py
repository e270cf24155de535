#!/usr/bin/env python3
"""Summary of bench/compare_inline_rotate.sh: per round, Rotate/Echo at
16 KiB on a server handing every Rotate to a work thread (queued) and on one
answering small Rotates on the gRPC thread (inline); medians over rounds.

Usage: summarize_inline_rotate.py RUN_DIR ROUNDS OUT_JSON  (markdown on stdout)
"""
import json
import os
import statistics
import subprocess
import sys
import time


def main(run_dir, rounds, out_json):
    runs = {}
    for server in ("queued", "inline"):
        for r in range(1, rounds + 1):
            with open(os.path.join(run_dir, "%s.%d.json" % (server, r))) as f:
                runs.setdefault(server, []).append(json.load(f))
    with open(out_json, "w") as f:
        json.dump(runs, f, indent=1)
    try:
        model = next(l.split(":", 1)[1].strip() for l in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if l.startswith("Model name:"))
    except (OSError, StopIteration):
        model = "unknown CPU"
    print("# Small Rotate calls: handed to a work thread (queued) vs answered on the gRPC thread (inline)\n")
    print("- date: %s; machine: %s, %d CPUs, load average %.1f (shared with other jobs: "
          "only the ratios within a round mean anything)" % (
              time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), model, os.cpu_count(),
              os.getloadavg()[0]))
    print("- %d rounds; per round service_bench's 16 KiB cases (float32 q [1,1,32,128]) against "
          "`ropeserve --inline_rotate_max_bytes=0` (queued), then the default (inline)\n" % rounds)
    print("| server | in flight | Rotate/Echo calls/s (median) | per round | Rotate/Echo p50 (median) |")
    print("|---|---|---|---|---|")
    for server in ("queued", "inline"):
        for conc in sorted({c["concurrency"] for c in runs[server][0]["cases"]
                            if c["name"].startswith("Echo/")}):
            ratios, p50s = [], []
            for run in runs[server]:
                cases = {(c["name"], c["concurrency"]): c for c in run["cases"]}
                e, r = cases[("Echo/16KiB", conc)], cases[("Rotate/16KiB", conc)]
                ratios.append(r["calls_per_s"] / e["calls_per_s"])
                p50s.append(r["p50_us"] / e["p50_us"])
            print("| %s | %d | %.2f | %s | %.2f |" % (
                server, conc, statistics.median(ratios), " ".join("%.2f" % x for x in ratios),
                statistics.median(p50s)))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
