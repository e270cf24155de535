#!/usr/bin/env python3
"""Before/after table of bench/compare_engine_bench.sh's interleaved runs:
per metric of summarize_engine_bench.metrics(), the median over rounds for
each build, and after / before.

  compare_engine_bench.py RUNS_DIR --before_rev=R --after_rev=R --json_out=F > F.md
"""
import argparse
import glob
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summarize_engine_bench  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("runs")
    parser.add_argument("--before_rev", required=True)
    parser.add_argument("--after_rev", required=True)
    parser.add_argument("--json_out", required=True)
    args = parser.parse_args()
    by_label = {}  # label -> [metrics of one run]
    for path in sorted(glob.glob(os.path.join(args.runs, "*.json"))):
        label = os.path.basename(path).split(".")[0]
        by_label.setdefault(label, []).append(summarize_engine_bench.metrics(json.load(open(path))))
    medians = {}
    for label, runs in by_label.items():
        keys = sorted({k for r in runs for k in r})
        medians[label] = {k: statistics.median(r[k] for r in runs if k in r) for k in keys}
    json.dump({"before_rev": args.before_rev, "after_rev": args.after_rev, "runs": by_label,
               "medians": medians}, open(args.json_out, "w"), indent=1)

    rounds = len(by_label.get("after", []))
    print("# Engine benchmark: before / after, interleaved in one session\n")
    print(f"- date: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}; {os.cpu_count()} CPUs "
          f"({platform.machine()}), shared with other jobs while measured")
    print(f"- before: {args.before_rev} (its engine, today's bench/engine_bench.cc); "
          f"after: {args.after_rev}")
    print(f"- {rounds} rounds of before, after, ... ; each figure is the median over rounds of a")
    print("  ratio measured within one run (rotate vs memcpy of the same bytes; the full-product")
    print("  sgemm's time over the attention call's). GB/s are absolute and noisier.")
    print("- reproduce: bench/compare_engine_bench.sh\n")
    before, after = medians.get("before", {}), medians.get("after", {})
    extra = sorted(l for l in medians if l.startswith("after_"))
    head = "| metric | before | after | after / before |" + "".join(
        f" {l[len('after_'):]} path |" for l in extra)
    print(head)
    print("|---" * (4 + len(extra)) + "|")
    for key in sorted(set(before) | set(after), key=lambda k: (not k.startswith("rotate"), k)):
        b, a = before.get(key), after.get(key)
        cells = [f"{b:.2f}" if b is not None else "", f"{a:.2f}" if a is not None else "",
                 f"{a / b:.2f}x" if a is not None and b else ""]
        for l in extra:
            v = medians[l].get(key)
            cells.append(f"{v:.2f}" if v is not None else "")
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
