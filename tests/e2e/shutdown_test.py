#!/usr/bin/python3
"""Bounded shutdown: after its drain, ropeserve exits within --teardown_timeout.

The long-attention drain scenario of bench/drain.sh (in which gRPC 1.51's
teardown once held the process ~10 s after every call had been answered:
bench/results/drain.md): ropeload runs long AttentionScores calls in a closed
loop, ropeserve gets SIGTERM mid-run, and per run this checks that
  - ropeserve exits 0, at most --teardown_timeout (+1.5 s of scheduling slack)
    after it prints "ropeserve: drained" (every accepted call answered);
  - no call the server accepted was lost: client OK == the server's OK from its
    last /metrics scrape taken while draining with no call in flight (or, when
    the last call's end and the endpoint's end fell between two scrapes,
    within the last draining scrape's OK .. OK + calls in flight), and the
    client's only errors are UNAVAILABLE refusals.
SIGTERM comes SIGTERM_AT_S in, once ropeload's calls are under way.
CI runs --runs=3 with --teardown_timeout=4s (see tests/e2e/CMakeLists.txt); bench/bounded_shutdown.sh runs 20
with the default 5 s and writes bench/results/bounded_shutdown.md.

Usage: shutdown_test.py --ropeserve P --ropeload P --workdir D [--runs N]
       [--teardown_timeout_s S] [--report PREFIX]
Standard library only, plus tests/support/python/ropeserve_process.py.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from ropeserve_process import RopeServe

# Scheduling slack on the exit after the drain: the watchdog's thread waking
# and this script seeing the exit, on a loaded 2-core machine (0.7 s seen at
# load 8); far below the gRPC teardown hang the bound is for (about 10 s).
SLACK_S = 1.5
SIGTERM_AT_S = 1.0
START_WAIT_S = 30  # at most, past SIGTERM_AT_S, for ropeload's calls to be under way
LOAD_S = 3
LONG_SCORES = ["--workload=scores", "--random_q_shape=1,512,8,64", "--random_k_shape=1,512,8,64",
               "--random_v_shape=1,512,8,64", "--causal", "--softmax", "-c", "8",
               "--connections=2"]


def scrape(server):
    try:
        page = server.metrics_page(timeout=2)
        ok = server.request_counts(page).get(("AttentionScores", "OK"), 0)
        return (server.gauge("rope_draining", page), server.gauge("rope_calls_in_flight", page),
                ok)
    except (OSError, KeyError):
        return None


def scrape_until(server, stop, t0, trace):
    """Scrapes until `stop`, appending (seconds since t0, what scrape() gave or the
    name of what it raised) to `trace`. A scrape taken while draining with no
    call in flight gives the final OK count: nothing is admitted once draining
    has begun."""
    while not stop.is_set():
        try:
            s = scrape(server)
        except Exception as e:  # pylint: disable=broad-except
            s = type(e).__name__  # a torn reply while the server goes away
        trace.append((round(time.monotonic() - t0, 3), s))
        # Back to back while the endpoint answers (the moment with no call in
        # flight can be milliseconds long); gently once it has gone.
        stop.wait(0.002 if isinstance(s, tuple) else 0.02)


def calls_under_way(s):
    """A scrape() showing calls in flight and one answered."""
    return s is not None and s[1] >= 1 and s[2] >= 1


def server_ok_of(trace):
    """The server's final OK count from the scrapes taken while draining: exact
    (an int) from the last one with no call in flight; else, when the last
    call's end and the endpoint's end fell between two scrapes (they can be
    milliseconds apart), {"at_least": n, "at_most": n + k} from the last one
    (OK n, k calls in flight, each ending OK or not); None without one."""
    draining = [s for _, s in trace if isinstance(s, tuple) and s[0] == 1]
    if not draining:
        return None
    settled = [s for s in draining if s[1] == 0]
    if settled:
        return settled[-1][2]
    _, in_flight, ok = draining[-1]
    return {"at_least": ok, "at_most": ok + int(in_flight)}


def thread_stacks(pid):
    """Every thread's stack of process `pid` by gdb (for a hung ropeload), or why not."""
    try:
        done = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=60)
        return done.stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return "(no stacks: %s)" % e


def one_run(args, index):
    bound = args.teardown_timeout_s
    server = RopeServe(args.ropeserve, ["--backend=cpu", "--shutdown_grace_period=10s",
                                        "--teardown_timeout=%gs" % bound], metrics=True)
    json_path = os.path.join(args.workdir, "run%d.json" % index)
    load = subprocess.Popen([args.ropeload, "--target=" + server.address, "--noprogress",
                             "-z", "%ds" % LOAD_S, "--max_error_rate=1", "--json=" + json_path]
                            + LONG_SCORES, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    result = {"run": index}
    try:
        # SIGTERM SIGTERM_AT_S in, and not before ropeload has calls in
        # flight and one answered (bounded): a ropeload slow to start on a
        # busy machine would otherwise meet a server already gone (exit 1,
        # "cannot use"), or a drain with nothing to drain.
        started = time.monotonic()
        time.sleep(SIGTERM_AT_S)
        while (not calls_under_way(scrape(server))
               and time.monotonic() < started + SIGTERM_AT_S + START_WAIT_S):
            time.sleep(0.05)
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        # The scrapes run beside the watch for the "drained" line and the
        # exit, until the server is gone: the moment between the last call's
        # end (no call in flight) and that line can be shorter than a scrape,
        # and a scrape in the watch's loop would delay the times it takes.
        drained_at = None
        trace = []
        stop_scraping = threading.Event()
        scraper = threading.Thread(target=scrape_until, args=(server, stop_scraping, t0, trace))
        scraper.start()
        deadline = t0 + 10 + bound + 20
        try:
            while server.proc.poll() is None and time.monotonic() < deadline:
                server.read_output(0.01)
                if drained_at is None and "ropeserve: drained" in server.output:
                    drained_at = time.monotonic()
        finally:
            stop_scraping.set()
            scraper.join(10)
        server_ok = server_ok_of(trace)
        try:
            code = server.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        exited_at = time.monotonic()
        server.kill()  # reaps; reads the rest of the output
        try:
            out, _ = load.communicate(timeout=LOAD_S + 60)
        except subprocess.TimeoutExpired:
            result["ropeload_stacks"] = thread_stacks(load.pid)
            load.kill()
            out, _ = load.communicate()
            result["ropeload_hung"] = True
    finally:
        if load.poll() is None:
            load.kill()
            load.wait()
        server.kill()
    result["exit_status"] = code
    result["drained_after_s"] = round(drained_at - t0, 3) if drained_at else None
    result["exit_after_drain_s"] = round(exited_at - drained_at, 3) if drained_at else None
    result["watchdog_fired"] = "teardown took over --teardown_timeout" in server.output
    result["ropeload_exit_status"] = load.returncode
    client = {}
    if load.returncode == 0:
        with open(json_path) as f:
            step = json.load(f)["steps"][0]
        client = {"ok": step["ok"] + step["warmup"]["ok"],
                  "error_codes": sorted({e["code"] for e in step["errors_by_code"]})}
    result["client"] = client
    result["server_ok"] = server_ok
    problems = []
    if code != 0:
        problems.append("exit status %s" % code)
    if drained_at is None:
        problems.append("no 'ropeserve: drained' line: " + server.output[-500:])
    elif result["exit_after_drain_s"] > bound + SLACK_S:
        problems.append("exited %.2f s after the drain: over the %g s bound"
                        % (result["exit_after_drain_s"], bound))
    if result.get("ropeload_hung"):
        problems.append("ropeload did not exit %d s after its run ended (killed); its threads: "
                        "%s" % (60, result["ropeload_stacks"][-8000:]))
    elif load.returncode != 0:
        # All of it: a sanitizer's report (ropeload under ASan) runs to a few
        # KiB, and the frames that name the cause are at its start.
        log_path = os.path.join(args.workdir, "ropeload_run%d.log" % index)
        with open(log_path, "w") as f:
            f.write(out or "")
        problems.append("ropeload exited %s (its whole output: %s): %s"
                        % (load.returncode, log_path, (out or "")[-8000:]))
    else:
        if set(client["error_codes"]) - {"UNAVAILABLE"}:
            problems.append("client errors other than UNAVAILABLE: %s" % client["error_codes"])
        if server_ok is None:
            problems.append("no scrape while draining (drained at %s s; scrapes (s since "
                            "SIGTERM, (draining, in flight, OK)): %s)"
                            % (result["drained_after_s"],
                               [t for t in trace if t[1] is not None][-12:] or trace[-5:]))
        elif isinstance(server_ok, int) and client["ok"] != server_ok:
            problems.append("client OK %d != server OK %d: an accepted call was lost"
                            % (client["ok"], server_ok))
        elif (isinstance(server_ok, dict)
              and not server_ok["at_least"] <= client["ok"] <= server_ok["at_most"]):
            problems.append("client OK %d outside the server's OK %d..%d (the last scrape "
                            "while draining, with calls in flight): an accepted call was lost"
                            % (client["ok"], server_ok["at_least"], server_ok["at_most"]))
    result["problems"] = problems
    return result


def markdown(args, runs):
    exits = [r["exit_after_drain_s"] for r in runs if r["exit_after_drain_s"] is not None]
    lines = ["# Bounded shutdown: exit within --teardown_timeout after the drain\n",
             "How: `bench/bounded_shutdown.sh` (`tests/e2e/shutdown_test.py --runs=%d`): per "
             "run, ropeserve (CPU backend, `--shutdown_grace_period=10s`, "
             "`--teardown_timeout=%gs`) on 127.0.0.1, ropeload `%s` for %d s, SIGTERM %.0f s "
             "in. Criteria per run: exit 0 at most the bound (+%.1f s slack) after the server "
             "prints `ropeserve: drained`; client OK == server OK (last draining scrape with "
             "nothing in flight); client errors only UNAVAILABLE.\n"
             % (len(runs), args.teardown_timeout_s, " ".join(LONG_SCORES), LOAD_S, SIGTERM_AT_S,
                SLACK_S),
             "Machine: shared 2-core machine (other agents compiled C++ in parallel); "
             "1-minute load average %.2f at the start.\n" % os.getloadavg()[0],
             "| run | exit | drained after SIGTERM s | exit after drain s | watchdog fired | "
             "client OK | server OK | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s |" % (
            r["run"], r["exit_status"], r["drained_after_s"], r["exit_after_drain_s"],
            "yes" if r["watchdog_fired"] else "no", r["client"].get("ok"), r["server_ok"],
            "PASS" if not r["problems"] else "FAIL: " + "; ".join(r["problems"])))
    lines.append("")
    lines.append("Summary: %d of %d runs pass; exit after drain max %.2f s, watchdog fired in %d "
                 "runs (gRPC's teardown would have taken longer).\n"
                 % (sum(1 for r in runs if not r["problems"]), len(runs), max(exits or [0]),
                    sum(1 for r in runs if r["watchdog_fired"])))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--ropeload", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--teardown_timeout_s", type=float, default=1.0)
    parser.add_argument("--report", default="", help="write PREFIX.json and PREFIX.md")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    runs = []
    for i in range(args.runs):
        r = one_run(args, i)
        print(json.dumps(r), flush=True)
        runs.append(r)
    if args.report:
        with open(args.report + ".json", "w") as f:
            json.dump({"teardown_timeout_s": args.teardown_timeout_s, "runs": runs}, f, indent=2)
            f.write("\n")
        with open(args.report + ".md", "w") as f:
            f.write(markdown(args, runs))
    failed = [r for r in runs if r["problems"]]
    print("%d of %d runs pass" % (len(runs) - len(failed), len(runs)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
