#!/usr/bin/python3
"""HAProxy 2.6 against nginx 1.22 (grpc_pass) in front of ropeserve, and
ropeserve alone, under the HTTP/2 attacks of tests/hostile/h2_attacks.py.

For each front (none, haproxy with deploy/proxy/haproxy.cfg, nginx with
bench/front_proxy/nginx.conf) and each attack (rapid reset, rapid reset with
the start of a message before each reset, CONTINUATION flood, 300 held
connections against a ropeserve limited to 96 descriptors), a fresh
ropeserve on a Unix socket (TCP for "none") and a fresh proxy; the attack
runs SECONDS; a well-behaved call goes every 0.5 s; ropeserve's RSS and CPU
and the proxy's are sampled. ropeserve is killed past 1.5 GiB. Writes a
Markdown table (--out) naming the machine.

Usage: bench/front_proxy.py --ropeserve build/bin/ropeserve [--seconds 8] [--out FILE]
"""

import argparse
import os
import platform
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "hostile"),
                os.path.join(HERE, "..", "tests", "support", "python")]

import h2_attacks  # noqa: E402
from front_proxy import Haproxy, Nginx, measure_attack  # noqa: E402
from ropeserve_process import RopeServe, unix_socket_path  # noqa: E402

KILL_ABOVE = 1536 << 20
ATTACKS = [("rapid_reset", {}), ("rapid_reset", {"with_data": True}),
           ("continuation_flood", {}), ("connections", {})]


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def one(args, front, attack, kwargs, workdir):
    with unix_socket_path("grpc.sock") as sock:
        binary = args.ropeserve
        if attack == "connections":
            binary = os.path.join(workdir, "ropeserve_nofile_96.sh")
            with open(binary, "w") as f:
                f.write("#!/bin/sh\nexec %s --nofile=96:96 %s \"$@\"\n"
                        % (shutil.which("prlimit"), os.path.abspath(args.ropeserve)))
            os.chmod(binary, 0o755)
        server = RopeServe(binary, ["--backend=cpu", "--cpu_threads=1", "--work_threads=2",
                                    "--shutdown_grace_period=1s", "--listener_stuck_after=0"],
                           listen="127.0.0.1:0,unix://" + sock)
        proxy = None
        try:
            if front == "haproxy":
                proxy = Haproxy(os.path.join(HERE, "..", "deploy", "proxy", "haproxy.cfg"),
                                "unix@" + sock, env={"ROPE_PROXY_MAXCONN": "64"})
            elif front == "nginx":
                # Over TCP: nginx's workers drop root's privileges (to
                # www-data) and could not open the socket's directory.
                proxy = Nginx(os.path.join(HERE, "front_proxy", "nginx.conf"),
                              "127.0.0.1:%d" % server.port)
            port = proxy.port if proxy else server.port
            if attack == "connections":
                report = {"server_rss_before": h2_attacks.rss_bytes(server.proc.pid)}
                held = h2_attacks.hold_connections("127.0.0.1", port, 300, timeout=1)
                time.sleep(1)
                report["held"] = len(held)
                report["server_fds"] = len(os.listdir("/proc/%d/fd" % server.proc.pid))
                for s in held:
                    s.close()
                time.sleep(1)
                report["server_rss_peak"] = h2_attacks.rss_bytes(server.proc.pid)
                report["call_after"] = h2_attacks.grpc_unary("127.0.0.1", port, timeout_s=3)
                report["server_alive"] = server.proc.poll() is None
                return report
            report = measure_attack(attack, port, server, proxy, duration_s=args.seconds,
                                    rss_limit_bytes=KILL_ABOVE, **kwargs)
            time.sleep(1)
            report["call_after"] = (h2_attacks.grpc_unary("127.0.0.1", port, timeout_s=3)
                                    if server.proc.poll() is None else None)
            report["server_rss_after"] = h2_attacks.rss_bytes(server.proc.pid)
            return report
        finally:
            if proxy:
                proxy.stop()
            server.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--out")
    args = parser.parse_args()
    workdir = os.path.join("/tmp", "rope-front-proxy-bench")
    os.makedirs(workdir, exist_ok=True)
    rows = []
    fronts = ["none", "haproxy"] + (["nginx"] if shutil.which("nginx") else [])
    if "nginx" not in fronts:
        print("nginx not found (scripts/setup.sh installs nginx-light): not compared")
    for front in fronts:
        for attack, kwargs in ATTACKS:
            name = attack + (" + data" if kwargs.get("with_data") else "")
            r = one(args, front, attack, kwargs, workdir)
            print(front, name, r, flush=True)
            mib = lambda b: "%.0f" % (b / 2**20)  # noqa: E731
            if attack == "connections":
                rows.append("| %s | %s | %d held | %s fds | %s -> %s | | | %s | %s |" % (
                    front, name, r["held"], r["server_fds"], mib(r["server_rss_before"]),
                    mib(r["server_rss_peak"]), "", "OK" if r["call_after"] == 0 else "FAILED"))
                continue
            sent = ("%d streams, %d conns" % (r["streams"], r["connections"])
                    if "streams" in r else "%d frames, %s MiB%s" % (
                        r["frames"], mib(r["bytes"]),
                        ", closed by the front" if r["closed_by_server"] else ""))
            rows.append("| %s | %s | %s | %.2f | %s -> %s%s | %.2f | %s | %d/%d | %s |" % (
                front, name, sent, r["server_cpu_s"], mib(r["server_rss_before"]),
                mib(r["server_rss_peak"]), " (killed)" if r["killed_for_memory"] else "",
                r["proxy_cpu_s"], mib(r["proxy_rss_peak"]) if r["proxy_rss_peak"] else "",
                r["calls_ok"], r["calls_ok"] + r["calls_failed"],
                "OK" if r["call_after"] == 0 else "FAILED"))
    header = [
        "# Front proxy: HAProxy 2.6 and nginx 1.22 against HTTP/2 attacks",
        "",
        "`bench/front_proxy.py --seconds %g`, one run, on %s (%d vCPUs), %s." % (
            args.seconds, cpu_model(), os.cpu_count(), time.strftime("%Y-%m-%d")),
        "ropeserve (CPU backend, 2 work threads) behind the front (HAProxy: on a Unix socket;",
        "nginx: on loopback TCP, its workers run as www-data), or alone on TCP (`none`); attacks from tests/hostile/h2_attacks.py (python3-h2), one client",
        "thread; a well-behaved GetServerInfo through the front every 0.5 s during the attack",
        "(`calls ok`) and one after it. ropeserve is killed above 1.5 GiB. The `connections`",
        "row holds 300 connections against a ropeserve limited to 96 file descriptors",
        "(HAProxy: ROPE_PROXY_MAXCONN=64).",
        "",
        "| front | attack | attacker sent | ropeserve CPU s | ropeserve RSS MiB | front CPU s "
        "| front RSS MiB | calls ok | call after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    text = "\n".join(header + rows) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
