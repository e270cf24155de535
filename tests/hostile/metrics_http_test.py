#!/usr/bin/python3
"""The /metrics endpoint against hostile HTTP clients, on a real ropeserve.

What a port scanner, a crawler or an attacker on the metrics network sends:
other paths (GET /, a favicon probe), other methods (HEAD, POST with a body,
PUT, OPTIONS), malformed request lines, an oversized URL, half request lines
held open, many idle connections from one host and from many. After each,
the server must still be running, and a scrape from another loopback address
must succeed. Raw sockets only (the point is to send what no HTTP library
would); every wait is bounded.

Usage: metrics_http_test.py --ropeserve PATH
"""

import argparse
import socket
import sys
import time
import unittest

from ropeserve_process import RopeServe

ARGS = None
CLIENT_TIMEOUT_S = 2  # --metrics_client_timeout of the server under test
IO_TIMEOUT_S = 5


def connect(port, source="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(IO_TIMEOUT_S)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def exchange(port, request, source="127.0.0.1"):
    """Sends `request` (bytes), half-closes, and returns every byte of the reply."""
    with connect(port, source) as s:
        s.sendall(request)
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        chunks = []
        deadline = time.monotonic() + IO_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def status_of(reply):
    line = reply.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = line.split(" ")
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None


def closed_by_peer(sock, timeout):
    """True once the server closes `sock` (EOF or reset) within `timeout` s."""
    sock.settimeout(timeout)
    try:
        return sock.recv(65536) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


class MetricsEndpointUnderAbuse(unittest.TestCase):
    def setUp(self):
        self.server = RopeServe(ARGS.ropeserve,
                                ["--backend=cpu", "--cpu_threads=1", "--work_threads=1",
                                 "--shutdown_grace_period=1s",
                                 "--metrics_client_timeout=%ds" % CLIENT_TIMEOUT_S],
                                metrics=True)
        self.port = self.server.metrics_port

    def tearDown(self):
        status = self.server.stop()
        self.assertEqual(status, 0, self.server.output)

    def assert_alive_and_scrapable(self, source="127.0.0.9"):
        self.assertIsNone(self.server.proc.poll(),
                          "ropeserve died:\n" + self.server.output)
        reply = exchange(self.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                         b"Connection: close\r\n\r\n", source=source)
        self.assertEqual(status_of(reply), 200, reply[:200])
        self.assertIn(b"rope_calls_in_flight", reply)

    def test_get_metrics_is_the_text_format(self):
        reply = exchange(self.port, b"GET /metrics HTTP/1.0\r\n\r\n")
        self.assertEqual(status_of(reply), 200)
        self.assertIn(b"text/plain; version=0.0.4", reply)
        self.assertIn(b"# TYPE rope_calls_in_flight gauge", reply)
        # A query string does not change the path.
        self.assertEqual(status_of(exchange(self.port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")),
                         200)

    def test_head_has_headers_and_no_body(self):
        reply = exchange(self.port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n"
                         b"Connection: close\r\n\r\n")
        self.assertEqual(status_of(reply), 200, reply)
        self.assertTrue(reply.endswith(b"\r\n\r\n"), reply[-200:])
        self.assertNotIn(b"rope_calls_in_flight", reply)
        self.assert_alive_and_scrapable()

    def test_other_paths_are_404(self):
        for path in [b"/", b"/favicon.ico", b"/metrics/", b"/../etc/passwd", b"*",
                     b"/metrics%00", b"http://evil.example/metrics"]:
            with self.subTest(path=path):
                reply = exchange(self.port, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n"
                                 b"Connection: close\r\n\r\n")
                self.assertIn(status_of(reply), (400, 404), reply[:200])
        self.assertEqual(status_of(exchange(self.port, b"GET / HTTP/1.0\r\n\r\n")), 404)
        self.assert_alive_and_scrapable()

    def test_other_methods_are_405(self):
        for request in [
                b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
                b"POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5\r\nhello\r\n0\r\n\r\n",
                b"PUT /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                b"OPTIONS /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n"]:
            with self.subTest(request=request[:20]):
                reply = exchange(self.port, request)
                self.assertEqual(status_of(reply), 405, reply[:200])
                self.assertIn(b"Allow: GET, HEAD", reply)
        self.assert_alive_and_scrapable()

    def test_malformed_requests_are_refused(self):
        for request in [b"\r\n\r\n", b"HELLO\r\n\r\n", b"GET\r\n\r\n",
                        b"GET /metrics HTTP/9.9\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00",
                        b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
                        b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 5000 + b"\r\n",
                        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"]:
            with self.subTest(request=request[:20]):
                reply = exchange(self.port, request)
                status = status_of(reply)
                # A refusal (4xx/5xx) or a closed connection; never a crash.
                self.assertTrue(status is None or status >= 400, reply[:200])
                self.assertIsNone(self.server.proc.poll(), self.server.output)
        self.assert_alive_and_scrapable()

    def test_half_request_lines_are_timed_out(self):
        held = [connect(self.port, "127.0.0.2") for _ in range(4)]
        try:
            for s in held:
                s.sendall(b"GET /metr")
            # Others are served meanwhile.
            self.assert_alive_and_scrapable()
            for s in held:
                self.assertTrue(closed_by_peer(s, CLIENT_TIMEOUT_S + 4),
                                "a half request line was kept open past the client timeout")
        finally:
            for s in held:
                s.close()

    def test_one_host_cannot_take_every_connection(self):
        # civetweb's workers were all taken by ~220 such connections; here one
        # address gets at most max_connections_per_address (16), the rest are
        # closed at once, and a scraper on another address is still served.
        held = []
        try:
            for _ in range(300):
                s = connect(self.port, "127.0.0.3")
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost")
                held.append(s)
            self.assert_alive_and_scrapable()
            closed = sum(closed_by_peer(s, 0.05) for s in held)
            self.assertGreaterEqual(closed, 300 - 16)
        finally:
            for s in held:
                s.close()

    def test_many_idle_hosts_leave_a_scrape_working(self):
        # 200 idle connections from 20 addresses, within every cap: one
        # event-driven thread serves them all and the scrape alongside.
        held = []
        try:
            for i in range(200):
                s = connect(self.port, "127.0.1.%d" % (1 + i % 20))
                s.sendall(b"GET /metrics HTTP/1.1\r\n")
                held.append(s)
            for _ in range(5):
                self.assert_alive_and_scrapable()
        finally:
            for s in held:
                s.close()

    def test_client_that_never_reads_is_dropped(self):
        # Many pipelined scrapes, never read: the server's sends stall, and
        # the client timeout ends the connection instead of holding it. Read
        # only after that: what the kernel buffered, then the close, arrive
        # within a second; a server still holding the connection would send
        # the rest and close only CLIENT_TIMEOUT_S after its last reply.
        s = connect(self.port, "127.0.0.4")
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            try:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 400)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                pass
            self.assert_alive_and_scrapable()
            time.sleep(CLIENT_TIMEOUT_S + 2)
            deadline = time.monotonic() + 1.0
            dropped = False
            while time.monotonic() < deadline and not dropped:
                try:
                    s.settimeout(max(0.01, deadline - time.monotonic()))
                    dropped = s.recv(1 << 20) == b""
                except socket.timeout:
                    break
                except (ConnectionResetError, BrokenPipeError):
                    dropped = True
            self.assertTrue(dropped, "a client that never reads kept its connection")
        finally:
            s.close()


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ropeserve", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
