#!/usr/bin/python3
"""TLS, mutual TLS and bearer tokens end to end, with the built binaries.

Makes a throw-away CA, server and client certificates with the openssl CLI
in --workdir (no key is committed), starts ropeserve with mutual TLS, a token
file and a plaintext --health_listen port, and checks from outside: ropectl,
ropeload and the Python example (grpcio's own TLS stack) get through with
the certificate and token; without the token, with a wrong one, without a
client certificate or in plaintext they are refused with the right status;
the health port answers plaintext probes; the common TLS mistakes are named
in one stderr line; bad security flags (an encrypted key too, with or without
a terminal) stop ropeserve at startup with exit status 2 and a message naming
the flag. Every wait is bounded. Standard library only, plus tests/support/python/ropeserve_process.py
(on PYTHONPATH under ctest).

Usage: security_e2e_test.py --ropeserve P --ropectl P --ropeload P --example P --workdir D
"""

import argparse
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
import unittest

from ropeserve_process import RopeServe
from throwaway_pki import make_certs

ARGS = None
START_TIMEOUT_S = 30
RUN_TIMEOUT_S = 120
TOKEN = "e2e-token-7c41d2"


def run(cmd, timeout=RUN_TIMEOUT_S):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def start_server(extra_args):
    """ropeserve with `extra_args`; .health is its --health_listen address (or None)."""
    server = RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1", "--work_threads=2",
                                        "--shutdown_grace_period=2s"] + extra_args,
                       start_timeout=START_TIMEOUT_S)
    server.health = None
    if any(a.startswith("--health_listen") for a in extra_args):
        match = server.wait_for_output(r"ropeserve health on (\S+)", timeout=START_TIMEOUT_S)
        if match is None:
            server.kill()
            raise RuntimeError("ropeserve did not print its health address: " + server.output)
        server.health = match.group(1)
    return server


class SecurityEndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = os.path.join(ARGS.workdir, "pki")
        shutil.rmtree(cls.d, ignore_errors=True)
        os.makedirs(cls.d)
        make_certs(cls.d)
        cls.tokens = os.path.join(cls.d, "tokens")
        with open(cls.tokens, "w") as f:
            f.write("# accepted tokens\n%s\nnext-token-0a\n" % TOKEN)
        cls.token = os.path.join(cls.d, "token")
        with open(cls.token, "w") as f:
            f.write(TOKEN + "\n")
        cls.wrong = os.path.join(cls.d, "wrong")
        with open(cls.wrong, "w") as f:
            f.write("not-the-token\n")
        cls.server = start_server(["--tls_cert_file=%s/server.pem" % cls.d,
                             "--tls_key_file=%s/server.key" % cls.d,
                             "--tls_client_ca_file=%s/ca.pem" % cls.d,
                             "--auth_token_file=" + cls.tokens,
                             "--health_listen=127.0.0.1:0"])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def client_flags(self, cert="client", token=True):
        flags = ["--target=" + self.server.address, "--tls_ca_file=%s/ca.pem" % self.d]
        if cert:
            flags += ["--tls_cert_file=%s/%s.pem" % (self.d, cert),
                      "--tls_key_file=%s/%s.key" % (self.d, cert)]
        if token:
            flags.append("--token_file=" + (token if isinstance(token, str) else self.token))
        return flags

    def test_startup_line_names_the_security_mode(self):
        self.assertIn("mutual TLS + bearer tokens (2)", self.server.output)

    def test_ropectl_rotates_with_certificate_and_token(self):
        result = run([ARGS.ropectl, "rotate", "--random_q_shape=1,8,4,64", "--deadline=20s"]
                     + self.client_flags())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_ropectl_without_token_is_unauthenticated(self):
        result = run([ARGS.ropectl, "info", "--deadline=10s"] + self.client_flags(token=False))
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("UNAUTHENTICATED: missing bearer token", result.stderr)

    def test_ropectl_with_wrong_token_is_unauthenticated(self):
        result = run([ARGS.ropectl, "info", "--deadline=10s"] + self.client_flags(token=self.wrong))
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("UNAUTHENTICATED: bearer token not accepted", result.stderr)

    def assert_one_line(self, stderr):
        """ropectl's promise: one line on stderr (gRPC's own handshake logs kept off it)."""
        self.assertEqual(len(stderr.splitlines()), 1, stderr)

    def test_clients_without_a_valid_certificate_do_not_connect(self):
        for cert, cause in ((None, "the server requires a client certificate"),
                            ("outsider", "the server refused the client certificate")):
            result = run([ARGS.ropectl, "info", "--deadline=10s"] + self.client_flags(cert=cert))
            self.assertEqual(result.returncode, 1, "%s: %s" % (cert, result.stderr))
            self.assertIn("UNAVAILABLE", result.stderr, cert)
            self.assertIn(cause, result.stderr, cert)
            self.assert_one_line(result.stderr)

    def test_plaintext_clients_do_not_connect(self):
        result = run([ARGS.ropectl, "info", "--deadline=10s", "--target=" + self.server.address])
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("UNAVAILABLE: the server requires TLS", result.stderr)
        self.assert_one_line(result.stderr)

    def test_localhost_to_an_ipv4_only_tls_server_names_tls_every_time(self):
        # localhost is [::1] and 127.0.0.1 to gRPC; the server listens on 127.0.0.1 only.
        # gRPC reports whichever address failed last, so without a probe of each address
        # some runs said only "[::1]: Connection refused".
        port = self.server.address.rsplit(":", 1)[1]
        for attempt in range(8):
            result = run([ARGS.ropectl, "info", "--deadline=10s", "--target=localhost:" + port])
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn("the server requires TLS", result.stderr, "run %d" % attempt)
            self.assert_one_line(result.stderr)

    def test_tls_client_to_a_plaintext_server_is_told_so(self):
        plain = start_server([])
        try:
            result = run([ARGS.ropectl, "info", "--deadline=10s", "--target=" + plain.address,
                          "--tls_ca_file=%s/ca.pem" % self.d])
        finally:
            plain.stop()
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("the server does not speak TLS", result.stderr)
        self.assert_one_line(result.stderr)

    def test_untrusted_server_certificate_is_told_so(self):
        result = run([ARGS.ropectl, "info", "--deadline=10s", "--target=" + self.server.address,
                      "--tls_ca_file=%s/other_ca.pem" % self.d])
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("not signed by a CA the client trusts", result.stderr)
        self.assert_one_line(result.stderr)

    def test_encrypted_key_is_refused_with_or_without_a_terminal(self):
        encrypted = os.path.join(self.d, "server_encrypted.key")
        subprocess.run(["openssl", "pkey", "-in", os.path.join(self.d, "server.key"), "-aes256",
                        "-passout", "pass:secret", "-out", encrypted], check=True,
                       capture_output=True, timeout=60)
        cmd = [ARGS.ropeserve, "--listen=127.0.0.1:0", "--backend=cpu",
               "--tls_cert_file=%s/server.pem" % self.d, "--tls_key_file=" + encrypted]
        expected = "--tls_key_file: the private key is encrypted"
        result = run(cmd, timeout=START_TIMEOUT_S)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn(expected, result.stderr)
        # On a terminal (its own session, the pty as controlling terminal, as
        # an operator's shell): no pass-phrase prompt, the same error.
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(cmd[0], cmd)
        output, deadline = b"", time.monotonic() + START_TIMEOUT_S
        status = None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    chunk = b""
                output += chunk
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            self.fail("ropeserve on a terminal did not exit (a pass-phrase prompt?): %r" % output)
        os.close(fd)
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 2, output)
        self.assertIn(expected.encode(), output)
        self.assertNotIn(b"pass phrase", output.lower())

    def test_health_port_answers_plaintext_probes(self):
        result = run([ARGS.ropectl, "health", "--deadline=10s", "--target=" + self.server.health])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("SERVING", result.stdout)
        # ... and nothing else.
        result = run([ARGS.ropectl, "info", "--deadline=10s", "--target=" + self.server.health])
        self.assertIn("UNIMPLEMENTED", result.stderr)

    def test_ropeload_runs_over_mutual_tls_with_a_token(self):
        report = os.path.join(ARGS.workdir, "secure_load.json")
        result = run([ARGS.ropeload, "--random_q_shape=1,1,8,64", "--requests=200",
                      "--concurrency=4", "--connections=2", "--noprogress", "--json=" + report]
                     + self.client_flags())
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        with open(report) as f:
            step = json.load(f)["steps"][0]
        self.assertEqual(step["ok"], 200, step)
        self.assertEqual(step["errors"], 0, step)

    def test_ropeload_without_token_stops_unauthenticated(self):
        result = run([ARGS.ropeload, "--random_q_shape=1,1,8,64", "--requests=10", "--noprogress"]
                     + self.client_flags(token=False))
        # Connect() (GetServerInfo) is refused first: no load runs.
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("UNAUTHENTICATED", result.stderr)

    def test_python_example_over_mutual_tls_with_a_token(self):
        try:
            import grpc  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
            import numpy  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        except ImportError:
            self.skipTest("python3-grpcio / python3-numpy not installed")
        result = run([sys.executable, ARGS.example, self.server.address,
                      "--tls-ca-file=%s/ca.pem" % self.d,
                      "--tls-cert-file=%s/client.pem" % self.d,
                      "--tls-key-file=%s/client.key" % self.d, "--token-file=" + self.token])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("all checks passed", result.stdout)

    def test_bad_security_flags_stop_ropeserve_naming_the_flag(self):
        d = self.d
        cases = [
            (["--tls_cert_file=%s/server.pem" % d], 2, "--tls_cert_file and --tls_key_file go together"),
            (["--auth_token_file=" + self.tokens], 2, "--auth_token_file needs TLS"),
            (["--tls_cert_file=%s/server.pem" % d, "--tls_key_file=%s/client.key" % d], 2,
             "does not belong to the certificate"),
            (["--tls_cert_file=%s/missing.pem" % d, "--tls_key_file=%s/server.key" % d], 2,
             "--tls_cert_file=%s/missing.pem" % d),
        ]
        for flags, code, message in cases:
            result = run([ARGS.ropeserve, "--listen=127.0.0.1:0", "--backend=cpu"] + flags,
                         timeout=START_TIMEOUT_S)
            self.assertEqual(result.returncode, code, "%s: %s" % (flags, result.stderr))
            self.assertIn(message, result.stderr, flags)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    for name in ("--ropeserve", "--ropectl", "--ropeload", "--example", "--workdir"):
        parser.add_argument(name, required=True)
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.workdir, exist_ok=True)
    if shutil.which("openssl") is None:
        print("SKIP: the openssl CLI is not installed")
        return 77
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
