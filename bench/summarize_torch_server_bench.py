#!/usr/bin/env python3
"""Summarises bench/run_torch_server_bench.sh: per scenario, ropeload's
throughput and p50/p99 latency against ropeserve and against the torch
server, medians over rounds, and the ratios.

  summarize_torch_server_bench.py WORK_DIR ROUNDS ROPESERVE_BINARY OUT_JSON > OUT.md
"""
import glob
import json
import os
import platform
import statistics
import sys
import time

SCENARIOS = {
    "decode_bf16": "Rotate decode: q [1,1,32,128] + k [1,1,8,128] bf16, c=8, 2 connections",
    "prefill_f32": "Rotate prefill: q [1,2048,32,128] + k [1,2048,8,128] f32, c=2",
    "prefill_bf16_llama3": "Rotate prefill, llama3 scaling: same shapes, bf16, c=2",
    "scores_causal_softmax": "AttentionScores: q, k [1,256,8,128] f32, causal softmax, c=4",
}


def main(work, rounds, ropeserve, out_json):
    steps = {}
    for path in sorted(glob.glob(os.path.join(work, "*.json"))):
        name, server, rnd, _ = os.path.basename(path).split(".")
        step = json.load(open(path))["steps"][0]
        steps.setdefault(name, {}).setdefault(server, []).append(
            {"round": int(rnd), "rps": step["rps"], "errors": step["errors"],
             "p50_ms": step["latency_ms"]["p50"], "p99_ms": step["latency_ms"]["p99"]})
    json.dump(steps, open(out_json, "w"), indent=1)
    print("# ropeserve vs a Python grpcio + torch server, through ropeload\n")
    print(f"- date: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}; {platform.processor() or 'cpu'}, "
          f"{os.cpu_count()} CPUs, shared with other jobs: compare the ratios only")
    print(f"- servers: {ropeserve} --backend=cpu; bench/torch_server/torch_rope_server.py (torch "
          "float32 math, tables cached per config, glibc malloc set up as ropeserve sets itself up: "
          "--malloc=ropeserve); both on 127.0.0.1 with the load client")
    print(f"- each scenario runs on one server, then the other, {rounds} rounds; medians of rounds")
    print("- reproduce: bench/run_torch_server_bench.sh\n")
    print("| scenario | ropeserve calls/s | torch calls/s | throughput ratio | "
          "p50 ms ropeserve / torch | p99 ms ropeserve / torch | errors |")
    print("|---|---|---|---|---|---|---|")
    for name, label in SCENARIOS.items():
        if name not in steps:
            continue
        r, t = steps[name].get("ropeserve", []), steps[name].get("torch", [])
        if not r or not t:
            continue
        med = lambda runs, key: statistics.median(x[key] for x in runs)
        errors = sum(x["errors"] for x in r + t)
        torch_rps = med(t, "rps")
        ratio = f"{med(r, 'rps') / torch_rps:.1f}x" if torch_rps > 0 else "(no torch call completed)"
        print(f"| {label} | {med(r, 'rps'):.1f} | {torch_rps:.2f} | {ratio} | "
              f"{med(r, 'p50_ms'):.2f} / {med(t, 'p50_ms'):.2f} | "
              f"{med(r, 'p99_ms'):.2f} / {med(t, 'p99_ms'):.2f} | {errors} |")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
