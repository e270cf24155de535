#!/usr/bin/python3
"""Signals a local user or a supervisor may send: none kills ropeserve at once.

SIGTERM, SIGINT and SIGQUIT drain (exit 0); SIGHUP, SIGUSR1, SIGUSR2,
SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR and the real-time signals are
logged and ignored, and calls go on. With TLS and credential reloading on,
the private copies of the certificate and key live in a directory under
$TMPDIR while the server runs and are gone after it stops, whichever
signal stopped it. Every wait is bounded.

Usage: signals_test.py --ropeserve PATH --workdir DIR
"""

import argparse
import glob
import os
import shutil
import signal
import sys
import time
import unittest

import h2_attacks
from ropeserve_process import RopeServe
from throwaway_pki import make_certs

ARGS = None
BASE_ARGS = ["--backend=cpu", "--cpu_threads=1", "--work_threads=1",
             "--shutdown_grace_period=1s"]


class Signals(unittest.TestCase):
    def test_signals_that_would_kill_are_ignored(self):
        server = RopeServe(ARGS.ropeserve, BASE_ARGS)
        try:
            for sig, name in [(signal.SIGHUP, "HUP"), (signal.SIGUSR1, "USR1"),
                              (signal.SIGUSR2, "USR2"), (signal.SIGALRM, "ALRM"),
                              (signal.SIGVTALRM, "VTALRM"), (signal.SIGPROF, "PROF"),
                              (signal.SIGIO, "POLL"), (signal.SIGPWR, "PWR"),
                              (signal.SIGRTMIN + 3, "real-time")]:
                server.proc.send_signal(sig)
                self.assertIsNotNone(
                    server.wait_for_output(r"signal %d \(%s\) ignored" % (sig, name), timeout=10),
                    server.output)
                self.assertIsNone(server.proc.poll(), server.output)
            # Calls still work, on a fresh connection.
            self.assertEqual(h2_attacks.grpc_unary("127.0.0.1", server.port), 0)
        finally:
            self.assertEqual(server.stop(), 0, server.output)

    def test_sigquit_drains(self):
        server = RopeServe(ARGS.ropeserve, BASE_ARGS)
        server.proc.send_signal(signal.SIGQUIT)
        try:
            server.proc.wait(timeout=30)
        finally:
            server.kill()
        self.assertEqual(server.proc.returncode, 0, server.output)
        self.assertIn("signal 3: draining", server.output)

    def test_no_copy_of_the_key_is_left_behind(self):
        certs = os.path.join(ARGS.workdir, "certs")
        tmp = os.path.join(ARGS.workdir, "tmp")
        shutil.rmtree(ARGS.workdir, ignore_errors=True)
        os.makedirs(certs)
        os.makedirs(tmp)
        make_certs(certs)
        env = dict(os.environ, TMPDIR=tmp)
        for stop in (signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM, signal.SIGINT):
            with self.subTest(stop=stop):
                server = RopeServe(ARGS.ropeserve,
                                   BASE_ARGS + ["--tls_cert_file=%s/server.pem" % certs,
                                                "--tls_key_file=%s/server.key" % certs,
                                                "--security_reload_interval=1s"], env=env)
                try:
                    copies = glob.glob(os.path.join(tmp, "ropeserve-credentials-*"))
                    self.assertEqual(len(copies), 1, server.output)
                    server.proc.send_signal(stop)
                    if stop == signal.SIGHUP:
                        self.assertIsNotNone(server.wait_for_output(r"ignored", timeout=10))
                        self.assertIsNone(server.proc.poll())
                        server.proc.send_signal(signal.SIGTERM)
                    server.proc.wait(timeout=30)
                finally:
                    server.kill()
                self.assertEqual(server.proc.returncode, 0, server.output)
                self.assertEqual(glob.glob(os.path.join(tmp, "ropeserve-credentials-*")), [],
                                 "a private copy of the key was left in $TMPDIR")


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--workdir", required=True)
    ARGS, rest = parser.parse_known_args()
    if shutil.which("openssl") is None:
        print("skipped: openssl not found")
        sys.exit(77)
    os.makedirs(ARGS.workdir, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
