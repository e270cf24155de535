#!/usr/bin/python3
"""File-descriptor exhaustion of the direct gRPC listener (CVE-2023-4785 class).

gRPC 1.51's listener stops for good once accept4() fails with EMFILE: more
connections at once than RLIMIT_NOFILE, closed again, leave a server healthy
by its own account and unreachable for every new connection. ropeserve
raises its soft limit to the hard limit at start (so a default soft limit of
1024 is not what an attacker must reach), and watches its listener: when a
connection waits unaccepted for --listener_stuck_after, it drains and exits
4 to be restarted. Each server runs under prlimit with a small limit; each
test opens 150 raw HTTP/2 connections at most and waits 30 s at most.

Usage: emfile_test.py --ropeserve PATH --workdir DIR
"""

import argparse
import os
import shutil
import sys
import time
import unittest

import h2_attacks
from ropeserve_process import RopeServe

ARGS = None
ATTACK_CONNECTIONS = 150
BASE_ARGS = ["--backend=cpu", "--cpu_threads=1", "--work_threads=1",
             "--shutdown_grace_period=1s"]


def limited(soft, hard):
    """A wrapper that runs ropeserve under RLIMIT_NOFILE soft:hard."""
    path = os.path.join(ARGS.workdir, "ropeserve_nofile_%d_%d.sh" % (soft, hard))
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec %s --nofile=%d:%d %s \"$@\"\n"
                % (shutil.which("prlimit"), soft, hard, os.path.abspath(ARGS.ropeserve)))
    os.chmod(path, 0o755)
    return path


def exhaust(port):
    """Opens ATTACK_CONNECTIONS connections at once, holds them a moment, closes them."""
    held = h2_attacks.hold_connections("127.0.0.1", port, ATTACK_CONNECTIONS, timeout=2)
    time.sleep(1)
    for s in held:
        s.close()
    return len(held)


class DirectListenerUnderFdExhaustion(unittest.TestCase):
    def test_soft_limit_is_raised_to_the_hard_limit(self):
        server = RopeServe(limited(96, 4096), BASE_ARGS)
        try:
            self.assertIn("open files: soft limit 96 raised to 4096 (the hard limit)",
                          server.output)
            self.assertEqual(exhaust(server.port), ATTACK_CONNECTIONS)
            # 150 connections are far below 4096: nothing was refused.
            self.assertEqual(h2_attacks.grpc_unary("127.0.0.1", server.port), 0,
                             server.output)
        finally:
            self.assertEqual(server.stop(), 0, server.output)

    def test_listener_that_stopped_accepting_ends_the_server(self):
        # Soft and hard limit 96: 150 connections exhaust it; gRPC's listener
        # stops for good. The server must notice, say so, and exit 4.
        server = RopeServe(limited(96, 96), BASE_ARGS + ["--listener_stuck_after=3s"])
        try:
            self.assertIn("open files: soft limit 96 (the hard limit is 96)", server.output)
            exhaust(server.port)
            deadline = time.monotonic() + 30
            while server.proc.poll() is None and time.monotonic() < deadline:
                # Fresh connections keep arriving, as clients' would.
                h2_attacks.grpc_unary("127.0.0.1", server.port, timeout_s=1)
                server.read_output(0.2)
            self.assertIsNotNone(server.proc.poll(),
                                 "ropeserve stayed up with a listener that no longer accepts:\n"
                                 + server.output)
            server.read_output(0.5)
            self.assertEqual(server.proc.returncode, 4, server.output)
            self.assertIn("has stopped accepting", server.output)
            self.assertIn("exiting 4 to be restarted", server.output)
        finally:
            server.kill()


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--workdir", required=True)
    ARGS, rest = parser.parse_known_args()
    if shutil.which("prlimit") is None:
        print("skipped: prlimit (util-linux) not found")
        sys.exit(77)
    os.makedirs(ARGS.workdir, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
