"""Start a ropeserve child process for tests, benchmarks and scripts.

The one Python way to run ropeserve on 127.0.0.1: it binds the gRPC port 0,
reads the address from the server's "ropeserve listening on ADDRESS" line,
optionally turns on /metrics on a free port, and stops the server with
SIGTERM (drain) or SIGKILL. Every wait is bounded.

    from ropeserve_process import RopeServe
    with RopeServe(binary, ["--backend=cpu"], metrics=True) as server:
        call(server.address)
        print(server.metrics_page())

Import it by putting tests/support/python on sys.path: ctest sets
PYTHONPATH for every Python test (rope_py_test in cmake/RopeHelpers.cmake),
and bench/drain.sh does the same. The C++ twin is
tests/support/server_process.h.
"""

import contextlib
import os
import re
import select
import signal
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
_LISTENING = re.compile(r"ropeserve listening on (\S+)")
_METRICS = re.compile(r"ropeserve metrics on (\S+?)/metrics")


class StartError(RuntimeError):
    """ropeserve exited or printed no listening line in time; .output has its output."""

    def __init__(self, message, output):
        super().__init__("%s\n--- ropeserve output ---\n%s" % (message, output))
        self.output = output


def free_port(host="127.0.0.1"):
    """A port that was free a moment ago (another process may take it first)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def unix_socket_path(name="rope.sock"):
    """A Unix socket path in a fresh directory under /tmp, removed on exit.

    A socket's path holds at most 107 bytes (sockaddr_un), and a build tree's
    path (a CI checkout, pytest's basetemp) can be longer than that, so tests
    put their sockets here rather than in their work directories.
    """
    directory = tempfile.mkdtemp(prefix="rope-", dir="/tmp")
    try:
        yield os.path.join(directory, name)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class RopeServe:
    """A running ropeserve child process.

    Attributes: proc (the Popen), address ("127.0.0.1:PORT" of the gRPC
    listener), port, metrics_port (None unless metrics=True), output (all
    it printed so far; stdout and stderr together, read on demand).
    """

    def __init__(self, binary, args=(), *, listen="127.0.0.1:0", metrics=False,
                 env=None, start_timeout=START_TIMEOUT_S, stderr_to_stdout=True):
        self.binary = binary
        self.output = ""
        self.metrics_port = None
        self._fd = None
        last_error = None
        # A free metrics port can be taken before the server binds it: retry.
        for _ in range(3 if metrics else 1):
            cmd = [binary, "--listen=%s" % listen] + list(args)
            if metrics:
                self.metrics_port = free_port()
                cmd += ["--metrics_port=%d" % self.metrics_port, "--metrics_host=127.0.0.1"]
            self.output = ""
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if stderr_to_stdout else None, env=env)
            self._fd = self.proc.stdout.fileno()
            try:
                self._wait_started(metrics, start_timeout)
                return
            except StartError as e:
                last_error = e
                self.kill()
        raise last_error

    # --- start-up ---------------------------------------------------------

    def _wait_started(self, metrics, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.output)
            if match and (not metrics or _METRICS.search(self.output)):
                self.address = match.group(1)
                self.port = int(self.address.rsplit(":", 1)[1])
                return
            if not self.read_output(min(0.5, max(0.0, deadline - time.monotonic()))):
                if self.proc.poll() is not None:
                    raise StartError("ropeserve exited with status %s before listening"
                                     % self.proc.returncode, self.output)
        raise StartError("ropeserve printed no listening line within %ss" % timeout,
                         self.output)

    def read_output(self, timeout=0.0):
        """Appends what the server printed (waiting up to `timeout` s); False at none."""
        # Raw reads: select() and a buffered readline() do not mix.
        if self._fd is None:
            return False
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return False
        chunk = os.read(self._fd, 65536)
        if not chunk:
            return False
        self.output += chunk.decode(errors="replace")
        return True

    def wait_for_output(self, pattern, timeout=10.0):
        """The first match of regex `pattern` in the output, waiting up to `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.output)
            if match:
                return match
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not self.read_output(min(0.5, remaining)) and self.proc.poll() is not None:
                self.read_output(0)
                return re.search(pattern, self.output)

    # --- metrics ----------------------------------------------------------

    def metrics_page(self, timeout=10):
        if self.metrics_port is None:
            raise RuntimeError("RopeServe(metrics=True) is needed to read /metrics")
        url = "http://127.0.0.1:%d/metrics" % self.metrics_port
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.read().decode()

    def request_counts(self, text=None):
        """{(rpc, code): count} of rope_requests_total (in `text`, or scraped now)."""
        if text is None:
            text = self.metrics_page()
        counts = {}
        for m in re.finditer(r'^rope_requests_total\{([^}]*)\} (\S+)$', text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            counts[(labels["rpc"], labels["code"])] = int(float(m.group(2)))
        return counts

    def gauge(self, name, text=None):
        """The value of the unlabelled metric `name` (in `text`, or scraped now)."""
        if text is None:
            text = self.metrics_page()
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
        if m is None:
            raise KeyError(name)
        return float(m.group(1))

    # --- stopping ---------------------------------------------------------

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM (drain), then the exit status; None if it had to be killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        self._close()
        return self.proc.returncode

    def kill(self):
        """SIGKILL and reap; safe to call more than once."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        self._close()

    def _close(self):
        if self._fd is not None:
            while self.read_output(0):
                pass
            self.proc.stdout.close()
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
