#!/usr/bin/python3
"""A replica killed (SIGKILL) mid-run: clients with retries lose only calls
whose reply had begun.

Three ropeserve processes on 127.0.0.1 behind one round_robin target
("ipv4:a,b,c", as DNS gives for a headless Service). ropeload runs a closed
loop with --max_attempts=5 (RopeClient's retry policy: UNAVAILABLE retried
on another address); one replica gets SIGKILL in the middle (no drain: a
crashed or evicted pod). gRPC retries a call only while no response has
reached the client (gRPC's retry design, A6: a response's headers commit
the call), so a call whose reply was on its way (a 1 MiB reply takes several
writes) fails UNAVAILABLE, and can fail only so: at most the calls in flight
(-c). Checks: ropeload exits 0 (its --max_error_rate allows those), every
failed call is UNAVAILABLE and they are at most -c, its report counts the
retries the servers reported (at least one: the calls in flight on the
killed replica were retried), and every OK call the servers counted reached
the client:
the surviving replicas' /metrics plus the killed one's last scrape, less
the calls retried or failed (a reply the killed replica counted may have
died with it, and its call was then retried or failed).

Usage: kill_replica_test.py --ropeserve P --ropeload P --workdir D [--report PREFIX]
Standard library only, plus tests/support/python/ropeserve_process.py.
With --report, writes PREFIX.json and PREFIX.md (bench/results/kill_replica).
"""

import argparse
import json
import os
import subprocess
import sys
import time

from ropeserve_process import RopeServe

LOAD_S = 4
KILL_AT_S = 1.5
START_WAIT_S = 30  # at most, for the replica's first answered call
# Calls of a few milliseconds, so that several are in flight on the killed
# replica when it dies.
CONCURRENCY = 12
FLAGS = ["--random_q_shape=1,256,16,128", "--random_k_shape=1,256,4,128", "--dtype=bfloat16",
         "--theta=500000", "--max_len=8192", "-c", str(CONCURRENCY), "--connections=2",
         "--max_attempts=5", "--max_error_rate=0.2"]


def ok_count(server):
    try:
        return server.request_counts().get(("Rotate", "OK"), 0)
    except OSError:
        return None


def run(args):
    # On 127.0.0.3, not 127.0.0.1: ropeload keeps reconnecting to the killed
    # replica's port, and a server of another test given that port by the
    # kernel would answer it (and count calls that are not its own).
    servers = [RopeServe(args.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                          "--shutdown_grace_period=2s"], metrics=True,
                         listen="127.0.0.3:0")
               for _ in range(3)]
    json_path = os.path.join(args.workdir, "kill_replica.json")
    target = "ipv4:" + ",".join(s.address for s in servers)
    try:
        load = subprocess.Popen([args.ropeload, "--target=" + target, "--noprogress",
                                 "-z", "%ds" % LOAD_S, "--json=" + json_path] + FLAGS,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # KILL_AT_S in, and not before the replica has answered calls (a
        # ropeload slow to start on a busy machine would otherwise find it
        # dead with none in flight, and nothing to retry), bounded.
        start = time.monotonic()
        last_seen = None
        while (time.monotonic() < start + KILL_AT_S
               or (not last_seen and time.monotonic() < start + START_WAIT_S)):
            last_seen = ok_count(servers[0]) or last_seen
            time.sleep(0.05)
        servers[0].kill()  # SIGKILL: no drain
        killed_at = time.monotonic()
        out, _ = load.communicate(timeout=LOAD_S + 120)
        survivors = [ok_count(s) for s in servers[1:]]
    finally:
        for s in servers:
            s.kill()
    result = {"ropeload_exit_status": load.returncode, "killed_after_s": KILL_AT_S,
              "killed_ok_at_last_scrape": last_seen, "survivors_ok": survivors,
              "command": "ropeload --target=ipv4:A,B,C -z %ds %s" % (LOAD_S, " ".join(FLAGS))}
    problems = []
    if load.returncode != 0:
        problems.append("ropeload exited %s: %s" % (load.returncode, out[-1500:]))
    else:
        with open(json_path) as f:
            step = json.load(f)["steps"][0]
        failed = step["errors_by_code"] + step["warmup"]["errors_by_code"]
        result.update({"ok": step["ok"] + step["warmup"]["ok"],
                       "errors": step["errors"] + step["warmup"]["errors"],
                       "retries": step["retries"], "retried_calls": step["retried_calls"]})
        # Calls whose reply had begun when the replica died: committed, not
        # retried, UNAVAILABLE; never more than were in flight.
        if any(e["code"] != "UNAVAILABLE" for e in failed) or result["errors"] > CONCURRENCY:
            problems.append("%d calls failed (at most %d UNAVAILABLE allowed): %s" %
                            (result["errors"], CONCURRENCY, failed))
        if step["retries"] < 1:
            problems.append("no retry was counted")
        if None not in survivors and last_seen is not None:
            # Every OK a survivor counted reached the client (their
            # connections lived on). The killed replica counts a call when
            # its handler finishes (server/service/unary_call.cc), before
            # gRPC writes the reply: a reply counted in its last scrape may
            # have died with it: that call was retried on a survivor
            # (counted twice by the servers, once by the client) or, its reply
            # begun, failed. So each such loss is also a retried or failed
            # call: a lower bound.
            floor = last_seen + sum(survivors) - step["retried_calls"] - result["errors"]
            if result["ok"] < floor:
                problems.append("client OK %d < the servers' %d less %d retried and %d failed "
                                "calls" % (result["ok"], last_seen + sum(survivors),
                                           step["retried_calls"], result["errors"]))
            if result["ok"] < sum(survivors):
                problems.append("client OK %d < the survivors' %d" %
                                (result["ok"], sum(survivors)))
    result["problems"] = problems
    return result


def markdown(r):
    return "\n".join([
        "# A replica killed mid-run: clients with retries\n",
        "How: `tests/deploy/kill_replica_test.py --report=bench/results/kill_replica` "
        "(CI runs the same test, `rope_deploy_kill_replica_test`): three ropeserve processes "
        "(CPU backend, 1 thread each) on 127.0.0.1 behind `ipv4:A,B,C` (round_robin, "
        "client-side health checking), `%s`; SIGKILL to one replica %.1f s in.\n"
        % (r["command"], r["killed_after_s"]),
        "Machine: shared 2-core machine (other agents compiled C++ in parallel).\n",
        "| client OK | client errors | retries (calls retried) | killed replica OK at its last "
        "scrape | survivors OK | verdict |", "|---|---|---|---|---|---|",
        "| %s | %s | %s (%s) | %s | %s | %s |" % (
            r.get("ok"), r.get("errors"), r.get("retries"), r.get("retried_calls"),
            r["killed_ok_at_last_scrape"], " + ".join(str(x) for x in r["survivors_ok"]),
            "PASS" if not r["problems"] else "FAIL: " + "; ".join(r["problems"])),
        "",
        "Retries are counted from the trailer `rope-previous-attempts`, in which ropeserve "
        "echoes gRPC's `grpc-previous-rpc-attempts` request header (gRPC C++ 1.51 does not "
        "give the count to the client): a retry whose every attempt failed before reaching a "
        "server would show as an error instead. A call whose reply had begun when the replica "
        "died is not retried (gRPC commits a call once a response reaches the client): it may "
        "fail UNAVAILABLE, and the verdict allows at most -c such calls.\n"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--ropeload", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--report", default="")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    r = run(args)
    print(json.dumps(r, indent=1))
    if args.report:
        with open(args.report + ".json", "w") as f:
            json.dump(r, f, indent=2)
            f.write("\n")
        with open(args.report + ".md", "w") as f:
            f.write(markdown(r))
    return 1 if r["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
