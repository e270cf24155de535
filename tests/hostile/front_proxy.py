"""Front proxies in front of a ropeserve child, for tests and bench/front_proxy.py.

    with Haproxy(config, backend="unix@/tmp/.../grpc.sock") as proxy:
        h2_attacks.grpc_unary("127.0.0.1", proxy.port)

Haproxy runs deploy/proxy/haproxy.cfg (the production file, configured by
its environment variables); Nginx runs a config with grpc_pass written for
the comparison in bench/front_proxy.py. Both bind 127.0.0.1 on a free port,
run in the foreground as children of the caller, and are stopped (SIGTERM,
then SIGKILL) on exit. `measure_attack` runs one attack from h2_attacks and
samples the server's (and the proxy's) memory and CPU meanwhile.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import h2_attacks
from ropeserve_process import free_port

START_TIMEOUT_S = 10


def _wait_listening(port, proc, timeout=START_TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the proxy exited with status %s" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the proxy did not listen on %d within %ss" % (port, timeout))


class _Proxy:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def pids(self):
        """The proxy's processes (its own and its children's)."""
        children = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True,
                                  text=True, check=False).stdout.split()
        return [self.proc.pid] + [int(pid) for pid in children]

    def rss_bytes(self):
        return sum(h2_attacks.rss_bytes(pid) for pid in self.pids())

    def cpu_seconds(self):
        return sum(h2_attacks.cpu_seconds(pid) for pid in self.pids())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


class Haproxy(_Proxy):
    """deploy/proxy/haproxy.cfg with ROPE_PROXY_BIND on a free loopback port."""

    def __init__(self, config, backend, env=None, nofile=None):
        self.tmp = None
        self.port = free_port()
        environment = dict(os.environ, ROPE_PROXY_BIND="127.0.0.1:%d" % self.port,
                           ROPE_BACKEND=backend, **(env or {}))
        command = [shutil.which("haproxy"), "-W", "-db", "-f", config]
        if nofile is not None:
            command = [shutil.which("prlimit"), "--nofile=%d:%d" % (nofile, nofile)] + command
        self.proc = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        _wait_listening(self.port, self.proc)

    def pids(self):
        # -W: a master process and its worker.
        return super().pids()


class Nginx(_Proxy):
    """nginx (grpc_pass) from `template` with FRONT_PORT, BACKEND and TMP replaced."""

    def __init__(self, template, backend):
        self.tmp = tempfile.mkdtemp(prefix="rope-nginx-")
        self.port = free_port()
        with open(template) as f:
            text = f.read()
        text = (text.replace("FRONT_PORT", str(self.port)).replace("BACKEND", backend)
                .replace("TMP", self.tmp))
        config = os.path.join(self.tmp, "nginx.conf")
        with open(config, "w") as f:
            f.write(text)
        self.proc = subprocess.Popen([shutil.which("nginx"), "-c", config, "-e", "stderr"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_listening(self.port, self.proc)


def measure_attack(attack, port, server, proxy=None, duration_s=4.0, rss_limit_bytes=None,
                   probe_port=None, probe_unix=None, **kwargs):
    """Runs h2_attacks.<attack>(127.0.0.1, port, duration_s, **kwargs) while
    sampling the server's RSS every 20 ms (and killing it past
    rss_limit_bytes: the test's memory limit) and making a well-behaved
    call every 0.5 s through probe_port (default `port`). Returns a dict:
    the attack's own result, server_rss_before/peak, server_cpu_s,
    proxy_rss_peak, proxy_cpu_s, calls_ok/calls_failed during the attack,
    killed_for_memory."""
    probe_port = probe_port or port
    result = {}
    runner = threading.Thread(target=lambda: result.update(
        getattr(h2_attacks, attack)("127.0.0.1", port, duration_s=duration_s, **kwargs)))
    pid = server.proc.pid
    rss_before = h2_attacks.rss_bytes(pid)
    cpu_before = h2_attacks.cpu_seconds(pid)
    proxy_cpu_before = proxy.cpu_seconds() if proxy else 0.0
    peak = rss_before
    proxy_peak = proxy.rss_bytes() if proxy else 0
    calls = {"ok": 0, "failed": 0}
    killed = False
    stop_probing = threading.Event()

    def probe():
        while not stop_probing.wait(0.5):
            status = h2_attacks.grpc_unary("127.0.0.1", probe_port, timeout_s=2,
                                           unix_path=probe_unix)
            calls["ok" if status == 0 else "failed"] += 1

    prober = threading.Thread(target=probe)
    runner.start()
    prober.start()
    while runner.is_alive():
        peak = max(peak, h2_attacks.rss_bytes(pid))
        if proxy:
            proxy_peak = max(proxy_peak, proxy.rss_bytes())
        if rss_limit_bytes is not None and peak > rss_limit_bytes and not killed:
            server.kill()
            killed = True
        time.sleep(0.02)
    runner.join()
    stop_probing.set()
    prober.join()
    return dict(result, server_rss_before=rss_before, server_rss_peak=peak,
                server_cpu_s=h2_attacks.cpu_seconds(pid) - cpu_before,
                proxy_rss_peak=proxy_peak,
                proxy_cpu_s=(proxy.cpu_seconds() - proxy_cpu_before) if proxy else 0.0,
                calls_ok=calls["ok"], calls_failed=calls["failed"], killed_for_memory=killed)
