#!/usr/bin/python3
"""--max_inflight_bytes under a flood of large calls, CI-sized.

Starts ropeserve (CPU backend) with a small in-flight budget and table cache,
then runs inflight_flood: CALLS large Rotate calls of REQUEST_MIB each at once,
one small Rotate every 20 ms throughout, the server's VmRSS sampled every
5 ms. Passes when
  - every large call is OK (with its whole reply) or RESOURCE_EXHAUSTED (none
    lost, none INTERNAL; how many are OK is reported, not judged: the
    transport's quota may reset every stream of a burst); every refusal comes from the admission budget
    (naming max_inflight_bytes) or the transport's memory quota (HTTP/2
    RST_STREAM ENHANCE_YOUR_CALM), and the refusals metric counts at least the first;
  - every small call is OK (its caller retries the transport's reset,
    RESOURCE_EXHAUSTED "RST_STREAM with error code 11", after a backoff, as
    docs/operations.md "Memory" tells callers: the quota may reset any call
    in flight; the resets are reported, small.transport_resets);
  - the server's peak RSS stays under its RSS before the flood + budget +
    table cache + MARGIN_MIB (the transport's buffers of messages still
    arriving, allocator slack);
  - the server reports no bytes in flight afterwards and still answers.
bench/inflight_budget.sh runs the same at full size (24 x 256 MiB, 2 GiB).

Usage: inflight_budget_test.py --ropeserve BIN --flood BIN [--calls N]
       [--request_mib M] [--budget_mib B] [--table_cache_mib T] [--margin_mib X]
       [--json OUT] [--skip_rss_bound REASON]
Exit status: 0 pass, 1 fail.
"""

import argparse
import json
import re
import subprocess
import sys

from polling import wait_for
from ropeserve_process import RopeServe

# How long the server's counters may take to settle after the flood's last
# call: only reached when they never do (the test fails then).
SETTLE_TIMEOUT_S = 60


def run(args):
    budget = args.budget_mib << 20
    table = args.table_cache_mib << 20
    # One client floods: the whole budget is its to fill (no per-client
    # share), as the small calls beside the flood come from it too.
    server_args = ["--backend=cpu", "--max_inflight_bytes=%d" % budget,
                   "--max_inflight_bytes_per_client=0",
                   "--table_cache_bytes=%d" % table, "--work_threads=2", "--cpu_threads=2"]
    with RopeServe(args.ropeserve, server_args, metrics=True) as server:
        flood = subprocess.run(
            [args.flood, "--target=" + server.address, "--calls=%d" % args.calls,
             "--request_mib=%d" % args.request_mib, "--server_pid=%d" % server.proc.pid,
             "--deadline=%ds" % args.deadline_s],
            capture_output=True, text=True, timeout=args.deadline_s + 60)
        if flood.returncode != 0:
            return ["inflight_flood exited %d: %s" % (flood.returncode, flood.stderr)], None
        result = json.loads(flood.stdout)
        # Bytes return when gRPC is done with each call (OnDone, after the
        # client saw its status; later still under load or ASan): bounded wait.
        in_use = wait_for(lambda: server.gauge("rope_inflight_bytes"), lambda v: v == 0,
                          SETTLE_TIMEOUT_S)
        refusals = server.gauge("rope_inflight_refusals_total")
        exit_code = server.stop()
    failures = []
    codes = result["codes"]
    ok = codes.get("OK", 0)
    exhausted = codes.get("8", 0)  # RESOURCE_EXHAUSTED
    others = {k: v for k, v in codes.items() if k not in ("OK", "8")}
    if others:
        failures.append("large calls ended with codes other than OK and RESOURCE_EXHAUSTED: %s "
                        "(first messages %s)" % (others, result["first_message"]))
    if ok + exhausted != args.calls:
        failures.append("%d of %d large calls answered" % (ok + exhausted, args.calls))
    refused_by = result["refused_by"]
    if refused_by.get("other"):
        failures.append("%d refusals came neither from the budget (naming "
                        "max_inflight_bytes) nor from the transport's quota: %r"
                        % (refused_by["other"], result["first_message"].get("8/other")))
    if ok and result["ok_reply_bytes_min"] < result["request_bytes"]:
        failures.append("an OK reply has %d bytes, less than the %d of q"
                        % (result["ok_reply_bytes_min"], result["request_bytes"]))
    small = result["small"]
    if set(small["codes"]) != {"OK"}:
        failures.append("small calls failed during the flood: %s" % small["codes"])
    peak = max(result["server_peak_rss_bytes"], result["server_vmhwm_bytes"])
    bound = result["server_rss_before_bytes"] + budget + table + (args.margin_mib << 20)
    if args.skip_rss_bound:
        print("not judged: the peak RSS bound (%s)" % args.skip_rss_bound)
    elif peak > bound:
        failures.append("server peak RSS %.0f MiB over the bound %.0f MiB (RSS before %.0f MiB "
                        "+ budget + table cache + margin %d MiB)"
                        % (peak / 2**20, bound / 2**20,
                           result["server_rss_before_bytes"] / 2**20, args.margin_mib))
    if in_use != 0:
        failures.append("rope_inflight_bytes is %s after the flood, want 0" % in_use)
    # A call the budget refused may still reach its client as the transport's
    # reset (the quota cancels streams concurrently): bounds, not equality.
    if not refused_by.get("budget", 0) <= refusals <= exhausted:
        failures.append("rope_inflight_refusals_total %s is outside [%d refusals naming the "
                        "budget, %d RESOURCE_EXHAUSTED]"
                        % (refusals, refused_by.get("budget", 0), exhausted))
    if exit_code != 0:
        failures.append("ropeserve exited %s after SIGTERM" % exit_code)
    result.update({"budget_bytes": budget, "table_cache_bytes": table,
                   "margin_bytes": args.margin_mib << 20, "peak_rss_bound_bytes": bound,
                   "peak_rss_bytes": peak, "refusals_metric": refusals})
    return failures, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--flood", required=True)
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--request_mib", type=int, default=16)
    parser.add_argument("--budget_mib", type=int, default=96)
    parser.add_argument("--table_cache_mib", type=int, default=16)
    parser.add_argument("--margin_mib", type=int, default=128)
    parser.add_argument("--deadline_s", type=int, default=60)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--skip_rss_bound", metavar="REASON",
                        help="report the peak RSS but do not judge it (e.g. under ASan, whose "
                             "quarantine keeps freed memory resident)")
    args = parser.parse_args()
    failures, result = run(args)
    if result is not None:
        print(json.dumps(result, indent=1))
        if args.json:
            with open(args.json, "w") as out:
                json.dump(result, out, indent=1)
    for failure in failures:
        print("FAIL: " + failure, file=sys.stderr)
    if not failures:
        print("PASS: %d x %d MiB against max_inflight_bytes %d MiB"
              % (args.calls, args.request_mib, args.budget_mib))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
