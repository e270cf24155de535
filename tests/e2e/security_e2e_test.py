#!/usr/bin/python3
"""TLS, mutual TLS and bearer tokens end to end, with the built binaries.

Makes a throw-away CA, server and client certificates with the openssl CLI
in --workdir (no key is committed), starts ropeserve with mutual TLS, a token
file and a plaintext --health_listen port, and checks from outside: ropectl,
ropeload and the Python example (grpcio's own TLS stack) get through with
the certificate and token; without the token, with a wrong one, without a
client certificate or in plaintext they are refused with the right status;
the health port answers plaintext probes; bad security flags stop ropeserve
at startup with exit status 2 and a message naming the flag. Every wait is
bounded. Standard library only, plus tests/support/python/ropeserve_process.py
(on PYTHONPATH under ctest).

Usage: security_e2e_test.py --ropeserve P --ropectl P --ropeload P --example P --workdir D
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
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

    def test_clients_without_a_valid_certificate_do_not_connect(self):
        for cert in (None, "outsider"):
            result = run([ARGS.ropectl, "info", "--deadline=10s"] + self.client_flags(cert=cert))
            self.assertEqual(result.returncode, 1, "%s: %s" % (cert, result.stderr))
            self.assertIn("UNAVAILABLE", result.stderr, cert)

    def test_plaintext_clients_do_not_connect(self):
        result = run([ARGS.ropectl, "info", "--deadline=10s", "--target=" + self.server.address])
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("UNAVAILABLE", result.stderr)

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
            (["--tls_cert_file=%s/missing.pem" % d, "--tls_key_file=%s/server.key" % d], 1,
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
