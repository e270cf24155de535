#!/usr/bin/python3
"""Paged cos/sin tables: cold vs warm calls at far positions, and
throughput under config churn, before and after paging, in one run.

Each server runs on 127.0.0.1 (CPU backend, --cpu_threads=2); calls come from
the ropeserve Python package, one at a time, float32 q, so that the figure is
the server's table work plus one small RPC. Scenarios:
  decode    Rotate q [1,1,32,128] (Llama 3.x / 4 heads) at a position no
            call has touched (a fresh theta per sample, so every sample is
            cold), then 20 calls at the next positions (warm); the server's
            RSS growth over the cold calls;
  prefill   Rotate q [1,8192,8,128] starting at a cold position, then 3
            warm calls of the same;
  churn     ropeload, closed loop (c=4), decode [1,1,32,128] bfloat16 cycling
            through 1000 configs (llama3 scaling, max_len 131072, positions
            near 100,000) against a 64 MiB table cache: requests per second;
  warm      the same with one config (its rows always cached), before and
            after alternated: the warm path.
"before" is a ropeserve built from the last commit before paging (its
max_len cap is 2^20: its decode and prefill run at 10^6 and 5*10^5), "after"
this tree's (also at 10,000,000 with Llama 4 Scout's config.json:
llama3 scaling, factor 16, low = high = 1, 10,485,760 positions).

Usage: bench/paged_tables.py --after BUILD_DIR [--before ROPESERVE [--before_desc TEXT]]
                             [--out bench/results/paged_tables]
Writes OUT.json and OUT.md.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCOUT = os.path.join(ROOT, "tests", "fixtures", "hf_configs", "Llama-4-Scout-17B-16E-Instruct.json")
COLD_SAMPLES = 5
WARM_CALLS = 20
CHURN_SECONDS = 20
WARM_ROUNDS = 3
WARM_SECONDS = 8


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def llama3_config(ropeserve, max_len, theta):
    return ropeserve.RopeConfig(
        head_dim=128, max_len=max_len, theta=theta, layout="half",
        scaling=ropeserve.Llama3Scaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                        original_max_position_embeddings=8192))


def scout_config(ropeserve, json_text):
    return ropeserve.RopeConfig(head_dim=None, max_len=10485760, layout="half",
                                hf_config_json=json_text)


def timed(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def decode(client, server, make_config, position, step=0):
    """Cold and warm decode latencies (ms) and the RSS growth of the cold calls.

    Sample k uses make_config(k) at position - k * step."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 1, 32, 128)).astype(np.float32)
    rss_before = rss_bytes(server.proc.pid)
    cold, warm = [], []
    for sample in range(COLD_SAMPLES):
        config = make_config(sample)
        at = position - sample * step
        cold.append(timed(lambda: client.rotate(q, config=config, start_pos=at)))
        for i in range(WARM_CALLS // COLD_SAMPLES):
            warm.append(timed(lambda: client.rotate(q, config=config, start_pos=at + 1 + i)))
    grown = rss_bytes(server.proc.pid) - rss_before
    return {"position": position, "cold_ms": cold, "cold_median_ms": statistics.median(cold),
            "warm_median_ms": statistics.median(warm),
            "cold_over_warm": statistics.median(cold) / statistics.median(warm),
            "rss_growth_per_cold_call_mib": grown / COLD_SAMPLES / 2**20}


def prefill(client, make_config, position):
    rng = np.random.default_rng(2)
    q = rng.standard_normal((1, 8192, 8, 128)).astype(np.float32)
    config = make_config(100)
    cold = timed(lambda: client.rotate(q, config=config, start_pos=position))
    warm = [timed(lambda: client.rotate(q, config=config, start_pos=position)) for _ in range(3)]
    return {"position": position, "tokens": 8192, "cold_ms": cold,
            "warm_median_ms": statistics.median(warm),
            "cold_over_warm": cold / statistics.median(warm)}


def churn(ropeload, address, json_out, configs=1000, seconds=CHURN_SECONDS):
    cmd = [ropeload, "--target=" + address, "--noprogress", "--duration=%ds" % seconds,
           "--json=" + json_out, "--random_q_shape=1,1,32,128", "--dtype=bfloat16",
           "--theta=500000", "--max_len=131072", "--rope-scaling=llama3", "--factor=8",
           "--low_freq_factor=1", "--high_freq_factor=4",
           "--original_max_position_embeddings=8192", "--start_pos=100000",
           "--configs=%d" % configs,
           "-c", "4"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=seconds + 120)
    with open(json_out) as f:
        step = json.load(f)["steps"][0]
    return {"configs": configs, "rps": step["rps"], "errors": step["errors"],
            "latency_ms": step["latency_ms"]}


def run_server(name, binary, ropeserve, RopeServe, ropeload, far):
    scout = open(SCOUT).read()
    result = {"binary": binary}
    with RopeServe(binary, ["--backend=cpu", "--cpu_threads=2", "--work_threads=2"]) as server:
        with ropeserve.Client(server.address) as client:
            client.info()
            million = 1 << 20
            result["decode_1e6"] = decode(
                client, server, lambda k: llama3_config(ropeserve, million, 500000.0 + k), 1000000)
            result["prefill_5e5"] = prefill(
                client, lambda k: llama3_config(ropeserve, million, 500000.0 + k), 500000)
            if far:
                # Scout's config.json: one table, so each sample goes one block
                # (4096 positions) further back to be cold.
                result["decode_1e7_scout"] = decode(
                    client, server, lambda k: scout_config(ropeserve, scout), 10000000, step=4096)
                result["prefill_5e6"] = prefill(
                    client, lambda k: llama3_config(ropeserve, 10485760, 500000.0 + k), 5000000)
    # The churn gets a server of its own with a 64 MiB table cache.
    with RopeServe(binary, ["--backend=cpu", "--cpu_threads=2", "--work_threads=2",
                            "--table_cache_bytes=67108864"]) as server:
        result["churn"] = churn(ropeload, server.address, "/tmp/paged_tables_%s.json" % name)
    print("%s: %s" % (name, json.dumps(result, indent=1)), file=sys.stderr)
    return result


def warm_rounds(binaries, RopeServe, ropeload):
    """The one-config load on each server in turn, WARM_ROUNDS times: the
    machine is shared, so the comparison is the median of alternated runs."""
    rps = {name: [] for name in binaries}
    for _ in range(WARM_ROUNDS):
        for name, binary in binaries.items():
            with RopeServe(binary, ["--backend=cpu", "--cpu_threads=2", "--work_threads=2"]) as server:
                rps[name].append(churn(ropeload, server.address, "/tmp/paged_tables_warm.json",
                                       configs=1, seconds=WARM_SECONDS)["rps"])
    return {name: {"rps": values, "median_rps": statistics.median(values)}
            for name, values in rps.items()}


def markdown(results, before_desc):
    lines = ["# Paged tables: cold and warm calls, churn", "",
             "CPU backend, 2 threads, on this shared 2-core machine; " + platform.node() + ", " +
             time.strftime("%Y-%m-%d") + ". Generated by `bench/paged_tables.py`." +
             (" before: %s; after: this tree." % before_desc if "before" in results else ""), "",
             "| server | call | position | cold (median ms) | warm (median ms) | cold / warm | RSS per cold call (MiB) |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if name == "warm":
            continue
        for key, label in (("decode_1e6", "decode [1,1,32,128]"), ("decode_1e7_scout", "decode, Scout config.json"),
                           ("prefill_5e5", "prefill 8192 tokens"), ("prefill_5e6", "prefill 8192 tokens")):
            if key not in r:
                continue
            s = r[key]
            cold = s.get("cold_median_ms", s["cold_ms"])
            rss = s.get("rss_growth_per_cold_call_mib")
            lines.append("| %s | %s | %d | %.2f | %.2f | %.1f | %s |" % (
                name, label, s["position"], cold, s["warm_median_ms"], s["cold_over_warm"],
                "%.1f" % rss if rss is not None else "-"))
    lines += ["", "Churn: ropeload c=4, decode [1,1,32,128] bfloat16, 1000 llama3 configs of "
              "131072 positions, 64 MiB table cache, %d s:" % CHURN_SECONDS, "",
              "| server | requests/s | errors | mean latency (ms) |", "|---|---|---|---|"]
    for name, r in results.items():
        if name == "warm":
            continue
        c = r["churn"]
        lines.append("| %s | %.1f | %d | %.2f |" % (name, c["rps"], c["errors"],
                                                    c["latency_ms"]["mean"]))
    if "before" in results:
        ratio = results["after"]["churn"]["rps"] / max(results["before"]["churn"]["rps"], 1e-9)
        lines += ["", "Churn throughput after / before: %.2fx." % ratio]
        warm = results["warm"]
        lines += ["", "Warm path (one config, its rows cached; same ropeload, %d alternated runs "
                  "of %d s each, median requests/s): before %.0f %s, after %.0f %s: after / "
                  "before %.2fx." % (WARM_ROUNDS, WARM_SECONDS, warm["before"]["median_rps"],
                                     [round(v) for v in warm["before"]["rps"]],
                                     warm["after"]["median_rps"],
                                     [round(v) for v in warm["after"]["rps"]],
                                     warm["after"]["median_rps"] / warm["before"]["median_rps"])]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--after", required=True, help="build directory of this tree")
    parser.add_argument("--before", help="a ropeserve binary from before paging")
    parser.add_argument("--before_desc", default="the last commit before paging (max_len cap 2^20)",
                        help="what --before is, for the report")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "paged_tables"))
    args = parser.parse_args()
    sys.path[:0] = [os.path.join(args.after, "client", "python"),
                    os.path.join(ROOT, "tests", "support", "python")]
    import ropeserve
    from ropeserve_process import RopeServe
    ropeload = os.path.join(args.after, "bin", "ropeload")
    results = {}
    if args.before:
        results["before"] = run_server("before", args.before, ropeserve, RopeServe, ropeload,
                                       far=False)
    after = os.path.join(args.after, "bin", "ropeserve")
    results["after"] = run_server("after", after, ropeserve, RopeServe, ropeload, far=True)
    if args.before:
        results["warm"] = warm_rounds({"before": args.before, "after": after}, RopeServe,
                                      ropeload)
    with open(args.out + ".json", "w") as f:
        json.dump(results, f, indent=1)
    report = markdown(results, args.before_desc)
    with open(args.out + ".md", "w") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
