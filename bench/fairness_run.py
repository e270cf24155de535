#!/usr/bin/python3
"""Fairness between clients (run by bench/fairness.sh; standard library only,
plus tests/support/python's ropeserve_process.py and throwaway_pki.py).

One ropeserve (CPU backend, TLS + two bearer tokens, --max_concurrent_calls
32) on 127.0.0.1. A well-behaved client (token B) runs an open loop at a
steady rate, first alone, then beside a flooding client (token A) that keeps
10x its share of calls in flight (a closed loop of 10 x --max_calls_per_client
workers on one connection). Criteria with --max_calls_per_client=8 and
--max_streams_per_connection=8: the well-behaved client's p99 beside the
flood is within 2x of its p99 alone, and it sees 0 errors. The same run with
the share alone, and with neither, are recorded for contrast. Writes
PREFIX.json and PREFIX.md; exit 0 when the criteria hold.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from ropeserve_process import RopeServe
from throwaway_pki import make_certs

MAX_CONCURRENT = 32
SHARE = 8
STEADY_RPS = 50
STEADY_S = 16
PAYLOAD = ["--random_q_shape=1,16,8,128", "--random_k_shape=1,16,2,128", "--dtype=bfloat16",
           "--theta=500000", "--max_len=8192", "--start_pos=100"]


def cpu_list(text):
    return {int(c) for c in text.split(",")} if text else None


def pinned(cpus):
    """A preexec_fn that pins the child to `cpus` (None: any CPU)."""
    def pin():
        if cpus:
            os.sched_setaffinity(0, cpus)
    return pin


def ropeload(args, server, d, token, flags, name):
    json_path = os.path.join(d, name + ".json")
    cmd = [args.ropeload, "--target=" + server.address, "--noprogress",
           "--tls_ca_file=%s/ca.pem" % d, "--token_file=%s/%s" % (d, token),
           "--json=" + json_path, "--max_error_rate=1"] + PAYLOAD + flags
    return json_path, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, preexec_fn=pinned(cpu_list(args.client_cpus)))


def summary(json_path):
    with open(json_path) as f:
        step = json.load(f)["steps"][0]
    return {"ok": step["ok"], "errors": step["errors"], "rps": round(step["rps"], 1),
            "p50_ms": round(step["latency_ms"]["p50"], 3),
            "p99_ms": round(step["latency_ms"]["p99"], 3),
            "errors_by_code": {e["code"]: e["count"] for e in step["errors_by_code"]}}


def scenario(args, d, share, streams=0):
    everywhere = os.sched_getaffinity(0)
    if args.server_cpus:  # the server inherits this process's affinity
        os.sched_setaffinity(0, cpu_list(args.server_cpus))
    server = RopeServe(args.ropeserve, [
        "--backend=cpu", "--max_concurrent_calls=%d" % MAX_CONCURRENT,
        "--max_calls_per_client=%d" % share, "--max_streams_per_connection=%d" % streams,
        "--tls_cert_file=%s/server.pem" % d,
        "--tls_key_file=%s/server.key" % d, "--auth_token_file=%s/tokens" % d,
        "--shutdown_grace_period=2s"] + args.server_flag)
    os.sched_setaffinity(0, everywhere)
    steady_flags = ["--rps=%d" % STEADY_RPS, "-z", "%ds" % STEADY_S, "--warmup=1s"]
    try:
        path, alone = ropeload(args, server, d, "token_b", steady_flags, "alone_%d" % share)
        alone.communicate(timeout=STEADY_S + 60)
        result = {"share": share, "streams": streams, "alone": summary(path)}
        flood_path, flood = ropeload(args, server, d, "token_a",
                                     ["-c", str(10 * SHARE), "-z", "%ds" % (STEADY_S + 4)],
                                     "flood_%d" % share)
        time.sleep(1.5)
        path, beside = ropeload(args, server, d, "token_b", steady_flags, "beside_%d" % share)
        out, _ = beside.communicate(timeout=STEADY_S + 60)
        flood_out, _ = flood.communicate(timeout=STEADY_S + 60)
        if not os.path.exists(path) or not os.path.exists(flood_path):
            raise RuntimeError("ropeload failed:\n%s\n--- flood:\n%s" % (out[-2000:],
                                                                          flood_out[-2000:]))
        result["beside_flood"] = summary(path)
        result["flood"] = summary(flood_path)
    finally:
        server.stop()
    a, b = result["alone"], result["beside_flood"]
    result["p99_ratio"] = round(b["p99_ms"] / a["p99_ms"], 2) if a["p99_ms"] > 0 else None
    result["pass"] = b["errors"] == 0 and result["p99_ratio"] is not None and \
        result["p99_ratio"] <= 2.0
    return result


def markdown(runs):
    out = ["# Fairness: a flooding client beside a well-behaved one\n",
           "How: `bench/fairness.sh` (`bench/fairness_run.py`). ropeserve (CPU backend, TLS + "
           "two bearer tokens, `--max_concurrent_calls=%d`) on 127.0.0.1. The well-behaved "
           "client (token B): ropeload open loop, %d req/s for %d s after 1 s of warm-up, "
           "payload `%s`; first alone, then beside the flooding client (token A): a closed "
           "loop of %d workers on one connection, 10x the share of %d calls in flight. "
           "Criteria (with `--max_calls_per_client=%d --max_streams_per_connection=%d`, "
           "the first row): the well-behaved client's p99 beside the flood within 2x of its "
           "p99 alone, and 0 errors. The other rows are for contrast: the share alone (the "
           "flood's calls past it are refused, each refusal costing the server a stream), "
           "and neither.\n"
           % (MAX_CONCURRENT, STEADY_RPS, STEADY_S, " ".join(PAYLOAD), 10 * SHARE, SHARE, SHARE,
              SHARE),
           "Machine: 2 cores (the two ropeload processes and the server share them unless "
           "pinned with --server_cpus/--client_cpus); 1-minute load average %.2f at the "
           "start.\n" % os.getloadavg()[0],
           "| --max_calls_per_client | --max_streams_per_connection | steady alone p50 / p99 ms "
           "| steady beside flood p50 / p99 ms | p99 ratio | steady errors beside flood | "
           "flood OK / refused | verdict |",
           "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        a, b, f = r["alone"], r["beside_flood"], r["flood"]
        out.append("| %d | %d | %s / %s | %s / %s | %s | %s | %d / %s | %s |" % (
            r["share"], r["streams"], a["p50_ms"], a["p99_ms"], b["p50_ms"], b["p99_ms"],
            r["p99_ratio"], b["errors_by_code"] or 0, f["ok"], f["errors_by_code"] or 0,
            ("PASS" if r["pass"] else "FAIL") if r is runs[0] else "(contrast)"))
    out.append("")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--ropeload", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--server_cpus", default="",
                        help="CPUs for the server, e.g. 0 (default: any)")
    parser.add_argument("--client_cpus", default="",
                        help="CPUs for both ropeloads, e.g. 1, standing in for client "
                        "machines (default: any)")
    parser.add_argument("--server_flag", action="append", default=[],
                        help="one more ropeserve flag (repeatable)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        make_certs(d)
        for name, token in (("token_a", "fairness-flood-a1"), ("token_b", "fairness-steady-b2")):
            with open(os.path.join(d, name), "w") as f:
                f.write(token + "\n")
        with open(os.path.join(d, "tokens"), "w") as f:
            f.write("fairness-flood-a1\nfairness-steady-b2\n")
        runs = [scenario(args, d, SHARE, SHARE), scenario(args, d, SHARE), scenario(args, d, 0)]
    for r in runs:
        print(json.dumps(r), flush=True)
    with open(args.prefix + ".json", "w") as f:
        json.dump({"runs": runs}, f, indent=2)
        f.write("\n")
    with open(args.prefix + ".md", "w") as f:
        f.write(markdown(runs))
    print(markdown(runs))
    return 0 if runs[0]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
