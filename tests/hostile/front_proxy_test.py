#!/usr/bin/python3
"""HTTP/2 attacks through the front proxy (deploy/proxy/haproxy.cfg).

ropeserve listens on a Unix socket behind HAProxy, as in the pod; a raw
HTTP/2 client (python3-h2) attacks the proxy's port, while a well-behaved
call goes through every 0.5 s and ropeserve's RSS is sampled (its memory
limit here: RSS before + MEMORY_MARGIN_MIB, past which the server is killed
and the test fails; gRPC 1.51 alone grows ~100-200 MB/s under rapid reset).

  - rapid reset (HEADERS then RST_STREAM, never reading, reconnecting after
    each GOAWAY), with and without the start of a message before the reset:
    ropeserve stays within its limit and calls keep succeeding;
  - a header block that never ends (CONTINUATION flood): the proxy closes
    the connection within its 16 KiB buffer; ropeserve sees nothing;
  - file descriptors: 300 connections held against a proxy allowed 64, in
    front of a ropeserve allowed 96 descriptors: ropeserve never runs out,
    and once the attacker lets go, calls succeed again;
  - a real client (the ropeserve Python package) makes unary calls and a
    RotateStream through the proxy: streams are not held up by it.

Attacks last seconds; everything is bounded. Skipped (77) without haproxy.

Usage: front_proxy_test.py --ropeserve PATH --config deploy/proxy/haproxy.cfg
"""

import argparse
import os
import shutil
import sys
import time
import unittest

import h2_attacks
from front_proxy import Haproxy, measure_attack
from ropeserve_process import RopeServe, unix_socket_path

ARGS = None
MEMORY_MARGIN_MIB = 64
ATTACK_S = 4
SERVER_ARGS = ["--backend=cpu", "--cpu_threads=1", "--work_threads=2",
               "--shutdown_grace_period=1s"]


class ThroughTheFrontProxy(unittest.TestCase):
    def start(self, nofile=None, proxy_env=None):
        self._sock_dir = unix_socket_path("grpc.sock")
        sock = self._sock_dir.__enter__()
        binary = ARGS.ropeserve
        if nofile is not None:
            binary = os.path.join(ARGS.workdir, "ropeserve_nofile_%d.sh" % nofile)
            with open(binary, "w") as f:
                f.write("#!/bin/sh\nexec %s --nofile=%d:%d %s \"$@\"\n"
                        % (shutil.which("prlimit"), nofile, nofile,
                           os.path.abspath(ARGS.ropeserve)))
            os.chmod(binary, 0o755)
        # The loopback port only lets RopeServe read where it listens; the
        # proxy uses the socket, as in the pod.
        self.server = RopeServe(binary, SERVER_ARGS, listen="127.0.0.1:0,unix://" + sock)
        self.sock = sock
        self.proxy = Haproxy(ARGS.config, "unix@" + sock, env=proxy_env)

    def tearDown(self):
        if getattr(self, "proxy", None) is not None:
            self.proxy.stop()
        if getattr(self, "server", None) is not None:
            status = self.server.stop()
            self.assertIn(status, (0, None), self.server.output)
        if getattr(self, "_sock_dir", None) is not None:
            self._sock_dir.__exit__(None, None, None)

    def assert_bounded(self, report, calls_during=True):
        limit = report["server_rss_before"] + (MEMORY_MARGIN_MIB << 20)
        self.assertFalse(report["killed_for_memory"],
                         "ropeserve grew past its limit: %s" % report)
        self.assertLessEqual(report["server_rss_peak"], limit, report)
        self.assertIsNone(self.server.proc.poll(), self.server.output)
        if calls_during:
            self.assertGreater(report["calls_ok"], 0, report)
        self.assertEqual(report["calls_failed"], 0, report)
        self.assertEqual(h2_attacks.grpc_unary("127.0.0.1", self.proxy.port), 0)

    def test_rapid_reset_does_not_reach_ropeserve(self):
        self.start()
        for with_data in (False, True):
            with self.subTest(with_data=with_data):
                report = measure_attack(
                    "rapid_reset", self.proxy.port, self.server, self.proxy,
                    duration_s=ATTACK_S, with_data=with_data,
                    rss_limit_bytes=h2_attacks.rss_bytes(self.server.proc.pid)
                    + (MEMORY_MARGIN_MIB << 20))
                self.assertGreater(report["streams"], 10000, report)  # the attack ran
                self.assert_bounded(report)

    def test_header_block_that_never_ends_is_cut_off(self):
        self.start()
        report = measure_attack("continuation_flood", self.proxy.port, self.server, self.proxy,
                                duration_s=ATTACK_S)
        self.assertTrue(report["closed_by_server"], report)
        self.assertLess(report["bytes"], 1 << 20, report)
        # Over at once: no call was made during it; one is made after.
        self.assert_bounded(report, calls_during=False)

    def test_connection_flood_does_not_exhaust_ropeserve(self):
        self.start(nofile=96, proxy_env={"ROPE_PROXY_MAXCONN": "64"})
        held = h2_attacks.hold_connections("127.0.0.1", self.proxy.port, 300, timeout=1)
        try:
            time.sleep(1)
            fds = len(os.listdir("/proc/%d/fd" % self.server.proc.pid))
            self.assertLess(fds, 96, "ropeserve's descriptors: %d" % fds)
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + 15
        status = None
        while status != 0 and time.monotonic() < deadline:
            status = h2_attacks.grpc_unary("127.0.0.1", self.proxy.port, timeout_s=2)
        self.assertEqual(status, 0)
        self.assertIsNone(self.server.proc.poll(), self.server.output)
        self.assertNotIn("Failed accept4", self.server.output)

    def test_real_client_calls_and_streams_pass(self):
        try:
            import numpy as np
            import ropeserve
        except ImportError as e:
            self.skipTest("the ropeserve Python package is not on PYTHONPATH: %s" % e)
        self.start()
        config = ropeserve.RopeConfig(head_dim=16, max_len=64, layout="half")
        rng = np.random.default_rng(5)
        with ropeserve.Client("127.0.0.1:%d" % self.proxy.port) as client:
            q = rng.standard_normal((1, 3, 2, 16)).astype(np.float32)
            direct_q, _ = client.rotate(q, config=config, start_pos=7)
            steps = [dict(q=rng.standard_normal((1, 1, 2, 16)).astype(np.float32),
                          start_pos=10 + i) for i in range(5)]
            started = time.monotonic()
            replies = list(client.rotate_stream(iter(steps), config=config))
            self.assertEqual(len(replies), 5)
            # The proxy forwards a stream once its first message starts; it
            # does not wait for the stream's end (10 s) to forward it.
            self.assertLess(time.monotonic() - started, 5)
        with ropeserve.Client("unix://" + self.sock) as direct:
            np.testing.assert_array_equal(direct.rotate(q, config=config, start_pos=7)[0],
                                          direct_q)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--workdir", required=True)
    ARGS, rest = parser.parse_known_args()
    if shutil.which("haproxy") is None or shutil.which("prlimit") is None:
        print("skipped: haproxy (or prlimit) not found; scripts/setup.sh installs it")
        sys.exit(77)
    os.makedirs(ARGS.workdir, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
