#!/usr/bin/python3
"""Sampling and verdicts for bench/soak.sh (standard library only).

  soak_report.py sample --pid PID --metrics URL --interval S --max_seconds N --csv PATH
      Every S seconds (at most N seconds, and only while PID lives) appends
      one row to PATH: the process's VmRSS/VmHWM/threads/open fds from
      /proc/PID, and from /metrics the table cache (bytes, budget, entries,
      hits, misses, evictions), calls in flight and requests by OK/not OK.

  soak_report.py report --series CSV --loads DIR --warmup_s W --duration_s D
                        --budget B --server_exit E --load_exit L --prefix P
      Reads the series and the ropeload reports (DIR/*.json, DIR/commands.txt),
      judges the criteria and writes P.json, P.md and P_series.csv. Exit
      status 0 when every criterion passes, 1 otherwise.
"""

import argparse
import csv
import glob
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
import urllib.request

COLUMNS = ["t_s", "rss_kb", "hwm_kb", "threads", "fds", "cache_bytes", "cache_budget_bytes",
           "cache_entries", "cache_hits", "cache_misses", "cache_evictions", "calls_in_flight",
           "requests_ok", "requests_not_ok", "loadavg_1m"]
RSS_GROWTH_LIMIT = 0.05


def proc_status(pid):
    """{field: value} of /proc/PID/status (kB fields as ints), or None when gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            text = f.read()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def kb(value):
    return int(value.split()[0]) if value else 0


def scrape(url):
    """(scalars {name: value}, requests {code: count}) from a Prometheus text page."""
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    scalars = {}
    requests = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^(\w+)(\{[^}]*\})? (\S+)", line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2), float(m.group(3))
        if labels is None:
            scalars[name] = value
        elif name == "rope_requests_total" and 'rpc="GetServerInfo"' not in labels:
            # GetServerInfo is ropeload's connect check, not load.
            code = re.search(r'code="([^"]*)"', labels).group(1)
            requests[code] = requests.get(code, 0) + value
    return scalars, requests


def sample(args):
    start = time.monotonic()
    with open(args.csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        while time.monotonic() - start <= args.max_seconds:
            t = time.monotonic() - start
            status = proc_status(args.pid)
            if status is None:
                break
            try:
                fds = len(os.listdir("/proc/%d/fd" % args.pid))
                scalars, requests = scrape(args.metrics)
            except OSError as e:  # the server is going away, or a scrape timed out
                print("soak sample at %.1f s: %s" % (t, e), file=sys.stderr)
                time.sleep(args.interval)
                continue
            ok = requests.get("OK", 0)
            writer.writerow([
                "%.1f" % t, kb(status.get("VmRSS")), kb(status.get("VmHWM")),
                status.get("Threads", "0"), fds,
                int(scalars.get("rope_table_cache_bytes", -1)),
                int(scalars.get("rope_table_cache_budget_bytes", -1)),
                int(scalars.get("rope_table_cache_entries", -1)),
                int(scalars.get("rope_table_cache_hits_total", -1)),
                int(scalars.get("rope_table_cache_misses_total", -1)),
                int(scalars.get("rope_table_cache_evictions_total", -1)),
                int(scalars.get("rope_calls_in_flight", -1)),
                int(ok), int(sum(requests.values()) - ok),
                "%.2f" % os.getloadavg()[0]])
            f.flush()
            time.sleep(max(0.0, args.interval - (time.monotonic() - start - t)))
    return 0


def machine():
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "kernel": platform.release(),
            "note": "shared 2-core machine: other agents compiled C++ in parallel during the "
                    "run, so throughput and latency here are not a benchmark; the criteria "
                    "are errors, memory and cache bytes"}


def load_reports(directory):
    commands = {}
    path = os.path.join(directory, "commands.txt")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                name, _, command = line.strip().partition(": ")
                commands[name] = command
    loads = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path) as f:
            report = json.load(f)
        step = report["steps"][0]
        errors = step["errors"] + step["warmup"]["errors"]
        loads.append({
            "name": name, "rpc": report["workload"]["rpc"], "config": report["workload"]["config"],
            "command": commands.get(name, ""),
            "concurrency": step["concurrency"], "ok": step["ok"] + step["warmup"]["ok"],
            "errors": errors,
            "errors_by_code": step["errors_by_code"] + step["warmup"]["errors_by_code"],
            "rps": round(step["rps"], 1), "p50_ms": round(step["latency_ms"]["p50"], 2),
            "p99_ms": round(step["latency_ms"]["p99"], 2),
            "max_ms": round(step["latency_ms"]["max"], 2),
            "verify_checked": report["verify"]["checked"],
            "verify_matched": report["verify"]["matched"],
            "verify_failures": report["verify"]["failures"]})
    return loads


def read_series(path):
    with open(path) as f:
        rows = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return rows


def least_squares_slope(xs, ys):
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def rss_analysis(rows, warmup_s, duration_s):
    """RSS after warm-up: the mean of the last minute against the first minute."""
    after = [r for r in rows if warmup_s <= r["t_s"] <= duration_s]
    if len(after) < 4:
        return None
    span = after[-1]["t_s"] - after[0]["t_s"]
    window = min(60.0, span / 3)
    first = [r["rss_kb"] for r in after if r["t_s"] <= after[0]["t_s"] + window]
    last = [r["rss_kb"] for r in after if r["t_s"] >= after[-1]["t_s"] - window]
    base = statistics.mean(first)
    end = statistics.mean(last)
    peak = max(r["rss_kb"] for r in after)
    # Least-squares slope of RSS over the post-warm-up samples.
    ts = [r["t_s"] for r in after]
    ys = [r["rss_kb"] for r in after]
    slope = least_squares_slope(ts, ys)
    # The same comparison over the second half of the run only (its first
    # minute against its last): whether RSS still climbs once settled.
    half = [r for r in after if r["t_s"] >= (after[0]["t_s"] + after[-1]["t_s"]) / 2]
    half_first = [r["rss_kb"] for r in half if r["t_s"] <= half[0]["t_s"] + window]
    second_half = {
        "from_s": round(half[0]["t_s"], 1),
        "growth_percent": round(100 * (end - statistics.mean(half_first)) /
                                statistics.mean(half_first), 2),
        "slope_mib_per_min": round(least_squares_slope(
            [r["t_s"] for r in half], [r["rss_kb"] for r in half]) * 60 / 1024, 3),
    }
    return {
        "window_s": round(window, 1),
        "baseline_mib": round(base / 1024, 1), "end_mib": round(end / 1024, 1),
        "peak_after_warmup_mib": round(peak / 1024, 1),
        "growth_percent": round(100 * (end - base) / base, 2),
        "peak_over_baseline_percent": round(100 * (peak - base) / base, 2),
        "slope_mib_per_min": round(slope * 60 / 1024, 3),
        "second_half": second_half,
        "rss_at_start_mib": round(rows[0]["rss_kb"] / 1024, 1),
        "hwm_mib": round(max(r["hwm_kb"] for r in rows) / 1024, 1),
    }


def rss_by_minute(rows):
    """[[minute start s, mean, min, max RSS MiB, server fds at the end]] per minute."""
    out = []
    for start in range(0, int(rows[-1]["t_s"]) + 1, 60):
        part = [r for r in rows if start <= r["t_s"] < start + 60]
        if part:
            rss = [r["rss_kb"] / 1024 for r in part]
            out.append([start, round(statistics.mean(rss), 1), round(min(rss), 1),
                        round(max(rss), 1), int(part[-1]["fds"])])
    return out


def report(args):
    rows = read_series(args.series)
    loads = load_reports(args.loads)
    last = rows[-1]
    client_errors = sum(l["errors"] for l in loads)
    client_ok = sum(l["ok"] for l in loads)
    server_not_ok = int(last["requests_not_ok"])
    rss = rss_analysis(rows, args.warmup_s, args.duration_s)
    over_budget = [r for r in rows if r["cache_bytes"] > r["cache_budget_bytes"]]
    verify_ok = all(l["verify_matched"] == l["verify_checked"] for l in loads)
    criteria = {
        "zero_rpc_errors": {
            "pass": client_errors == 0 and server_not_ok == 0 and args.load_exit == 0,
            "client_errors": client_errors, "server_non_ok_requests": server_not_ok,
            "ropeload_exit_status_all_zero": args.load_exit == 0},
        "rss_growth_below_5_percent": {
            "pass": rss is not None and rss["growth_percent"] < 100 * RSS_GROWTH_LIMIT,
            "growth_percent": rss["growth_percent"] if rss else None},
        "cache_bytes_never_above_budget": {
            "pass": not over_budget and all(r["cache_budget_bytes"] == args.budget for r in rows),
            "max_cache_bytes": int(max(r["cache_bytes"] for r in rows)),
            "budget_bytes": args.budget, "samples_over_budget": len(over_budget)},
        "replies_verified": {
            "pass": verify_ok and sum(l["verify_checked"] for l in loads) > 0,
            "checked": sum(l["verify_checked"] for l in loads),
            "matched": sum(l["verify_matched"] for l in loads)},
        "server_exit_0_on_sigterm": {"pass": args.server_exit == 0,
                                     "exit_status": args.server_exit},
    }
    result = {
        "what": "bench/soak.sh: one ropeserve (CPU backend) on 127.0.0.1, five ropeload "
                "processes in parallel (Rotate decode, Rotate prefill, AttentionScores, "
                "RotateStream, GetTable) cycling 1000 distinct RoPE configs through a small "
                "table cache",
        "server_flags": args.server_flags.strip(),
        "duration_s": args.duration_s, "warmup_s": args.warmup_s,
        "sample_interval_s": round(rows[1]["t_s"] - rows[0]["t_s"], 1) if len(rows) > 1 else None,
        "samples": len(rows),
        "table_cache_budget_bytes": args.budget,
        "distinct_configs": sum(int(m.group(1)) for l in loads
                                for m in [re.search(r"--configs=(\d+)", l["command"])] if m),
        "machine": machine(),
        "loadavg_1m": {"min": min(r["loadavg_1m"] for r in rows),
                       "mean": round(statistics.mean(r["loadavg_1m"] for r in rows), 2),
                       "max": max(r["loadavg_1m"] for r in rows)},
        "requests_ok": client_ok, "server_requests_ok": int(last["requests_ok"]),
        "cache": {"hits": int(last["cache_hits"]), "misses": int(last["cache_misses"]),
                  "evictions": int(last["cache_evictions"]),
                  "entries_max": int(max(r["cache_entries"] for r in rows)),
                  "bytes_max": int(max(r["cache_bytes"] for r in rows))},
        "threads_max": int(max(r["threads"] for r in rows)),
        "fds_first_last": [int(rows[0]["fds"]), int(last["fds"])],
        "rss": rss, "rss_by_minute": rss_by_minute(rows), "loads": loads,
        "criteria": criteria,
        "pass": all(c["pass"] for c in criteria.values()),
        "series_csv": os.path.basename(args.prefix) + "_series.csv",
    }
    shutil.copyfile(args.series, args.prefix + "_series.csv")
    with open(args.prefix + ".json", "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    with open(args.prefix + ".md", "w") as f:
        f.write(markdown(result))
    print(markdown(result))
    return 0 if result["pass"] else 1


def verdict(ok):
    return "PASS" if ok else "FAIL"


def markdown(r):
    c = r["criteria"]
    rss = r["rss"] or {}
    m = r["machine"]
    out = ["# Soak: %d s of mixed load, %d configs churning a %.0f MiB table cache\n"
           % (r["duration_s"], r["distinct_configs"], r["table_cache_budget_bytes"] / 2**20),
           "How: `bench/soak.sh` (DURATION_S=%d, WARMUP_S=%d). %s%s. The server "
           "(`ropeserve %s`) had its VmRSS (/proc/PID/status) and /metrics sampled every "
           "%s s (%d samples, `%s`)." % (
               r["duration_s"], r["warmup_s"], r["what"][len("bench/soak.sh: ")].upper(),
               r["what"][len("bench/soak.sh: ") + 1:], r["server_flags"],
               r["sample_interval_s"], r["samples"], r["series_csv"]),
           "",
           "Machine: %s, %d cores, %.1f GiB, Linux %s. %s (1-minute load average during the "
           "run: %.2f mean, %.2f max)." % (m["cpu"], m["cores"], m["memory_gib"], m["kernel"],
                                           m["note"][0].upper() + m["note"][1:],
                                           r["loadavg_1m"]["mean"], r["loadavg_1m"]["max"]),
           "",
           "| criterion | result | verdict |", "|---|---|---|",
           "| zero RPC errors | %d client errors, %d non-OK on the server, %d OK calls "
           "(server counted %d) | %s |" % (
               c["zero_rpc_errors"]["client_errors"],
               c["zero_rpc_errors"]["server_non_ok_requests"],
               r["requests_ok"], r["server_requests_ok"], verdict(c["zero_rpc_errors"]["pass"])),
           "| RSS growth after warm-up < 5%% | %s%% (mean of the first %s s after warm-up "
           "%s MiB, of the last %s s %s MiB; peak %s MiB; slope %s MiB/min) | %s |" % (
               rss.get("growth_percent"), rss.get("window_s"), rss.get("baseline_mib"),
               rss.get("window_s"), rss.get("end_mib"), rss.get("peak_after_warmup_mib"),
               rss.get("slope_mib_per_min"), verdict(c["rss_growth_below_5_percent"]["pass"])),
           "| table-cache bytes never above the budget | max %d of %d bytes, %d samples over | "
           "%s |" % (c["cache_bytes_never_above_budget"]["max_cache_bytes"],
                     c["cache_bytes_never_above_budget"]["budget_bytes"],
                     c["cache_bytes_never_above_budget"]["samples_over_budget"],
                     verdict(c["cache_bytes_never_above_budget"]["pass"])),
           "| replies correct (--verify, local CPU engine) | %d of %d match | %s |" % (
               c["replies_verified"]["matched"], c["replies_verified"]["checked"],
               verdict(c["replies_verified"]["pass"])),
           "| ropeserve exits 0 on SIGTERM after the soak | exit %d | %s |" % (
               c["server_exit_0_on_sigterm"]["exit_status"],
               verdict(c["server_exit_0_on_sigterm"]["pass"])),
           "",
           "Overall: **%s**.\n" % verdict(r["pass"]),
           "Table cache: %d misses (builds), %d hits, %d evictions, at most %d entries; "
           "%d distinct configs. Server threads at most %d; open fds %d at the start, %d at "
           "the end; RSS %s MiB at the first sample, high-water mark %s MiB.\n" % (
               r["cache"]["misses"], r["cache"]["hits"], r["cache"]["evictions"],
               r["cache"]["entries_max"], r["distinct_configs"], r["threads_max"],
               r["fds_first_last"][0], r["fds_first_last"][1], rss.get("rss_at_start_mib"),
               rss.get("hwm_mib")),
           "Second half of the run alone (from %s s): RSS growth %s%%, slope %s MiB/min.\n" % (
               rss.get("second_half", {}).get("from_s"),
               rss.get("second_half", {}).get("growth_percent"),
               rss.get("second_half", {}).get("slope_mib_per_min")),
           "RSS by minute (MiB; open fds of the server at the minute's end):\n",
           "| from s | mean | min | max | fds |", "|---|---|---|---|---|"] + [
           "| %d | %.1f | %.1f | %.1f | %d |" % tuple(m) for m in r.get("rss_by_minute", [])] + [
           "",
           "Cache bytes and RSS are sampled, so a peak between two samples is not seen; the "
           "cache counts only tables it holds (tables being built and evicted tables still "
           "held by a call are outside the budget, by design).\n",
           "| load | rpc | c | OK | errors | req/s | p50 ms | p99 ms | verified |",
           "|---|---|---|---|---|---|---|---|---|"]
    for l in r["loads"]:
        out.append("| %s | %s | %s | %d | %d | %.1f | %.2f | %.2f | %d/%d |" % (
            l["name"], l["rpc"], l["concurrency"], l["ok"], l["errors"], l["rps"], l["p50_ms"],
            l["p99_ms"], l["verify_matched"], l["verify_checked"]))
    out.append("")
    out.append("Commands (each with `--target=... -z %ds --window=5s --verify=N`):\n" %
               r["duration_s"])
    for l in r["loads"]:
        out.append("- %s: `%s`" % (l["name"], l["command"]))
        for e in l["errors_by_code"]:
            out.append("  - %s x%d: %s" % (e["code"], e["count"], e["first_message"]))
    out.append("")
    return "\n".join(out)


def rerender(args):
    """Rewrites P.md (and the per-minute table in P.json) from P.json and P_series.csv."""
    with open(args.prefix + ".json") as f:
        result = json.load(f)
    rows = read_series(args.prefix + "_series.csv")
    result["rss_by_minute"] = rss_by_minute(rows)
    result["rss"] = rss_analysis(rows, result["warmup_s"], result["duration_s"])
    result.setdefault("server_flags", args.server_flags)
    with open(args.prefix + ".json", "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    with open(args.prefix + ".md", "w") as f:
        f.write(markdown(result))
    return 0


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--metrics", required=True)
    s.add_argument("--interval", type=float, default=2.0)
    s.add_argument("--max_seconds", type=float, required=True)
    s.add_argument("--csv", required=True)
    r = sub.add_parser("report")
    r.add_argument("--series", required=True)
    r.add_argument("--loads", required=True)
    r.add_argument("--warmup_s", type=float, required=True)
    r.add_argument("--duration_s", type=float, required=True)
    r.add_argument("--budget", type=int, required=True)
    r.add_argument("--server_exit", type=int, required=True)
    r.add_argument("--load_exit", type=int, required=True)
    r.add_argument("--prefix", required=True)
    r.add_argument("--server_flags", default="")
    g = sub.add_parser("rerender")
    g.add_argument("--prefix", required=True)
    g.add_argument("--server_flags", default="")
    args = parser.parse_args()
    if args.command == "sample":
        return sample(args)
    return report(args) if args.command == "report" else rerender(args)


if __name__ == "__main__":
    sys.exit(main())
