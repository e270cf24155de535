#!/usr/bin/python3
"""Markdown summary of bench/results/inflight_budget.json (bench/inflight_budget.sh)."""

import json
import sys

MiB = 2**20


def flood(name, r, extra):
    if r is None:
        return ["## %s: not run" % name, ""]
    codes = r["codes"]
    return ["## %s" % name, "",
            "| figure | value |", "|---|---|",
            "| large calls | %d x %d MiB q (%d wire bytes each), at once, one connection each |"
            % (r["calls"], r["request_bytes"] // MiB, r["wire_bytes"]),
            "| OK / RESOURCE_EXHAUSTED / other | %d / %d / %d |"
            % (codes.get("OK", 0), codes.get("8", 0),
               sum(v for k, v in codes.items() if k not in ("OK", "8"))),
            "| refused by the admission budget / the transport's quota | %d / %d |"
            % (r.get("refused_by", {}).get("budget", 0),
               r.get("refused_by", {}).get("transport", 0)),
            "| a refusal | %s |" % r["first_message"].get("8", "-"),
            "| flood duration | %.1f s |" % r["flood_seconds"],
            "| small calls (64 KiB Rotate, one at a time) during the flood | %d, codes %s |"
            % (r["small"]["count"], r["small"]["codes"]),
            "| small call p50 / p99 / max | %.1f / %.1f / %.1f ms |"
            % (r["small"]["p50_ms"], r["small"]["p99_ms"], r["small"]["max_ms"]),
            "| server RSS before / peak | %.0f / %.0f MiB |"
            % (r["server_rss_before_bytes"] / MiB,
               max(r["server_peak_rss_bytes"], r["server_vmhwm_bytes"]) / MiB),
            ] + extra + [""]


def main():
    data = json.load(open(sys.argv[1]))
    host, container = data["host"], data["container"]
    lines = ["# In-flight byte budget under a flood", "",
             "Machine: 2 cores shared with other helpers' builds and tests (noisy); CPU "
             "backend; client and server on 127.0.0.1. Raw figures: inflight_budget.json. "
             "Produced by bench/inflight_budget.sh (the driver of the CI test "
             "rope_load_inflight_budget_test, at full size).", "",
             "Server: --max_inflight_bytes=2147483648 (1 GiB for the transport's quota, 1 GiB "
             "for admitted calls: one 256 MiB Rotate, request + reply, at a time), "
             "--table_cache_bytes=268435456, --cpu_threads=2 --work_threads=2.", ""]
    if host:
        lines += flood("Host", host, [
            "| budget + table cache + stated margin | %d + %d + %d MiB |"
            % (host["budget_bytes"] // MiB, host["table_cache_bytes"] // MiB,
               host["margin_bytes"] // MiB),
            "| bound on peak RSS (RSS before + the above) | %.0f MiB |"
            % (host["peak_rss_bound_bytes"] / MiB),
            "| all properties hold | %s |" % data["host_pass"]])
    if container:
        lines += flood("Podman container, --memory=3g --memory-swap=3g", container, [
            "| OOM killed / running after / exit code after SIGTERM | %s / %s / %s |"
            % (container["oom_killed"], container["running_after"], container["exit_code"]),
            "| all properties hold | %s |" % data["container_pass"]])
    bench = data["service_bench"]
    if bench.get("off") and bench.get("on"):
        lines += ["## Calls within the budget: Rotate/Echo service bench, budget off vs on", "",
                  "Two servers one after the other (--max_inflight_bytes=0, then 2 GiB); the "
                  "machine's load changed between them, so compare the Rotate/Echo ratio "
                  "within each run (Echo is not charged to the budget, Rotate is; with 0 the budget still counts every call under its mutex, without a limit).", "",
                  "| payload | in flight | Rotate/Echo calls/s, off | Rotate/Echo calls/s, on "
                  "| Rotate p50 us off / on |", "|---|---|---|---|---|"]
        def cases(run):
            return {(c["name"], c["concurrency"]): c for c in run["cases"]}
        off, on = cases(bench["off"]), cases(bench["on"])
        for (name, conc), rotate_on in sorted(on.items()):
            if not name.startswith("Rotate/"):
                continue
            size = name.split("/", 1)[1]
            echo_on, echo_off = on.get(("Echo/" + size, conc)), off.get(("Echo/" + size, conc))
            rotate_off = off.get((name, conc))
            if not (echo_on and echo_off and rotate_off):
                continue
            ratio = lambda r, e: r["calls_per_s"] / e["calls_per_s"] if e["calls_per_s"] else 0
            lines.append("| %s | %d | %.2f | %.2f | %.0f / %.0f |"
                         % (size, conc, ratio(rotate_off, echo_off), ratio(rotate_on, echo_on),
                            rotate_off["p50_us"], rotate_on["p50_us"]))
        lines.append("")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
