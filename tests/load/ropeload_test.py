#!/usr/bin/python3
"""ropeload against a real ropeserve on 127.0.0.1, checked from outside.

Each test starts its own ropeserve (with a Prometheus endpoint on a free
loopback port), runs the ropeload binary for about a second, and checks what
it wrote: the JSON schema, ordered percentiles, OK counts equal to the
server's own rope_requests_total delta, errors counted by status code,
open-loop rate accuracy by count, and an HTML report that parses and holds
SVG charts. Standard library only (/usr/bin/python3), plus RopeServe from
tests/support/python/ropeserve_process.py (on PYTHONPATH under ctest).

Usage: ropeload_test.py --ropeserve PATH --ropeload PATH --workdir DIR [unittest args]
"""

import argparse
import html.parser
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import xml.etree.ElementTree as ElementTree

from polling import wait_for
from ropeserve_process import RopeServe

ARGS = None
START_TIMEOUT_S = 30
RUN_TIMEOUT_S = 120


def delta(before, after, rpc, code):
    return after.get((rpc, code), 0) - before.get((rpc, code), 0)


class RopeloadTest(unittest.TestCase):
    def setUp(self):
        self.server = RopeServe(ARGS.ropeserve, ["--backend=cpu", "--shutdown_grace_period=2s"],
                                metrics=True, start_timeout=START_TIMEOUT_S)
        self.dir = os.path.join(ARGS.workdir, self.id().split(".")[-1])
        os.makedirs(self.dir, exist_ok=True)

    def tearDown(self):
        self.server.stop()

    def ropeload(self, *flags, expect_rc=0):
        """Runs ropeload against the server; returns (stdout, report JSON)."""
        json_path = os.path.join(self.dir, "report.json")
        if os.path.exists(json_path):
            os.remove(json_path)
        cmd = [ARGS.ropeload, "--target=" + self.server.address, "--noprogress",
               "--json=" + json_path] + list(flags)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        self.assertEqual(proc.returncode, expect_rc,
                         "command: %s\nstdout:\n%s\nstderr:\n%s" % (" ".join(cmd), proc.stdout,
                                                                     proc.stderr))
        with open(json_path) as f:
            return proc.stdout, json.load(f)

    # -------------------------------------------------------------- schema

    def test_json_has_the_schema_fields_and_ordered_percentiles(self):
        _, report = self.ropeload("--random_q_shape=1,8,4,64", "-c", "2", "-n", "300",
                                  "--window=100ms")
        for key in ("schema", "target", "server", "workload", "load", "steps", "slo", "verify"):
            self.assertIn(key, report)
        self.assertEqual(report["schema"], "ropeload/1")
        self.assertEqual(report["workload"]["rpc"], "Rotate")
        self.assertEqual(report["load"]["mode"], "closed")
        self.assertEqual(len(report["steps"]), 1)
        step = report["steps"][0]
        for key in ("concurrency", "measured_s", "issued", "ok", "errors", "rps",
                    "sent_mb_per_s", "received_mb_per_s", "latency_ms", "marshal_ms", "wait_ms",
                    "errors_by_code", "windows", "stable", "stability", "histogram", "warmup",
                    "peak_in_flight"):
            self.assertIn(key, step)
        self.assertEqual(step["issued"], 300)
        self.assertEqual(step["ok"] + step["errors"], 300)
        self.assertEqual(step["ok"], 300, step["errors_by_code"])
        self.assertLessEqual(step["peak_in_flight"], 2)
        lat = step["latency_ms"]
        order = [lat[k] for k in ("min", "p50", "p90", "p95", "p99", "p999", "max")]
        self.assertEqual(order, sorted(order), lat)
        self.assertGreater(lat["min"], 0)
        self.assertLessEqual(lat["min"], lat["mean"])
        self.assertLessEqual(lat["mean"], lat["max"])
        self.assertEqual(lat["count"], step["ok"])
        self.assertEqual(sum(b["count"] for b in step["histogram"]), step["ok"])
        self.assertEqual(sum(w["ok"] for w in step["windows"]), step["ok"])
        self.assertLessEqual(step["marshal_ms"]["mean"], lat["mean"])
        self.assertGreater(step["sent_mb_per_s"], 0)
        self.assertIn("stable", step["stability"])

    # -------------------------------------------------------------- counts

    def check_ok_count_matches_server(self, rpc, *flags):
        before = self.server.request_counts()
        _, report = self.ropeload(*flags)
        after = self.server.request_counts()
        step = report["steps"][0]
        self.assertGreater(step["ok"], 0)
        self.assertEqual(step["errors"], 0, step["errors_by_code"])
        self.assertEqual(delta(before, after, rpc, "OK"), step["ok"] + step["warmup"]["ok"])

    def test_ok_count_equals_server_counter_rotate(self):
        self.check_ok_count_matches_server(
            "Rotate", "--random_q_shape=1,4,8,64", "--random_k_shape=1,4,2,64", "-c", "4",
            "--connections=2", "-z", "1s", "--warmup=300ms")

    def test_shm_rotates_by_reference_on_every_connection(self):
        # Two connections from one host: one client identity on the server
        # (it knows clients by token, certificate or host, not by port), so
        # the second registration finds the region already this client's.
        before = self.server.request_counts()
        stdout, report = self.ropeload("--shm", "--random_q_shape=1,64,8,64",
                                       "--random_k_shape=1,64,2,64", "-c", "2", "--connections=2",
                                       "-n", "100")
        after = self.server.request_counts()
        step = report["steps"][0]
        self.assertEqual(step["errors"], 0, step["errors_by_code"])
        self.assertEqual(delta(before, after, "Rotate", "OK"), step["ok"] + step["warmup"]["ok"])
        self.assertEqual(delta(before, after, "RegisterSharedMemory", "OK"), 1)
        self.assertEqual(delta(before, after, "RegisterSharedMemory", "ALREADY_EXISTS"), 1)
        # The run unregisters its region on the way out, so a second run from
        # this host registers the same name again.
        self.assertEqual(delta(before, after, "UnregisterSharedMemory", "OK"), 1)
        self.ropeload("--shm", "--random_q_shape=1,4,8,64", "-n", "10")
        self.assertIn("by shared-memory reference", report["workload"]["payload"])
        # A reference request is small: the 160 KiB of tensors stay in the region.
        self.assertLess(report["workload"]["request_bytes"], 1024)
        self.assert_usage_error("--shm", "--verify=1", "--random_q_shape=1,4,8,64")

    def assert_usage_error(self, *flags):
        cmd = [ARGS.ropeload, "--target=" + self.server.address, "--noprogress", "-n", "1"] + list(flags)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--shm and --verify do not go together", proc.stderr)

    def test_ok_count_equals_server_counter_rotate_stream(self):
        self.check_ok_count_matches_server(
            "RotateStream", "--workload=rotate_stream", "--random_q_shape=1,4,8,64", "-c", "3",
            "-z", "1s", "--warmup=200ms")

    def test_ok_count_equals_server_counter_scores_open_loop(self):
        self.check_ok_count_matches_server(
            "AttentionScores", "--workload=scores", "--random_q_shape=1,16,4,32",
            "--random_k_shape=1,16,4,32", "--causal", "--rps=100", "--poisson", "-z", "1s")

    def test_ok_count_equals_server_counter_table(self):
        self.check_ok_count_matches_server(
            "GetTable", "--workload=table", "--head_dim=64", "--table_count=32", "-c", "2",
            "-n", "200")

    # -------------------------------------------------------------- errors

    def test_errors_are_counted_by_status_code(self):
        before = self.server.request_counts()
        # q's last dim is 64 but the config says 32.
        # Every call fails: over the default --max_error_rate=0, so exit 3.
        stdout, report = self.ropeload("--random_q_shape=1,2,4,64", "--head_dim=32", "-c", "2",
                                       "-n", "150", expect_rc=3)
        after = self.server.request_counts()
        step = report["steps"][0]
        self.assertEqual(step["ok"], 0)
        self.assertEqual(step["errors"], 150)
        self.assertEqual(len(step["errors_by_code"]), 1)
        error = step["errors_by_code"][0]
        self.assertEqual(error["code"], "INVALID_ARGUMENT")
        self.assertEqual(error["code_number"], 3)
        self.assertEqual(error["count"], 150)
        self.assertIn("head_dim", error["first_message"])
        self.assertEqual(delta(before, after, "Rotate", "INVALID_ARGUMENT"), 150)
        self.assertIn("INVALID_ARGUMENT", stdout)
        self.assertIn("150 of 150 measured calls failed", stdout)
        self.assertIn("--max_error_rate=0: EXCEEDED (exit 3)", stdout)
        self.assertEqual(report["errors"], {"calls": 150, "failed": 150, "max_error_rate": 0,
                                            "exceeded": True})

    def test_errors_within_max_error_rate_exit_zero(self):
        # 20 of 20 fail; --max_error_rate=1 allows all of them.
        stdout, report = self.ropeload("--random_q_shape=1,4,2,16", "--max_len=64",
                                       "--start_pos=100", "-n", "20", "--max-error-rate=1")
        self.assertEqual(report["errors"]["failed"], 20)
        self.assertFalse(report["errors"]["exceeded"])
        self.assertIn("--max_error_rate=1: within", stdout)

    def test_unwritable_report_path_fails_before_any_call(self):
        before = self.server.request_counts()
        cmd = [ARGS.ropeload, "--target=" + self.server.address, "--noprogress",
               "--random_q_shape=1,4,4,32", "-n", "50",
               "--html=" + os.path.join(self.dir, "no_such_dir", "report.html")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--html=", proc.stderr)
        self.assertIn("cannot write there", proc.stderr)
        self.assertEqual(self.server.request_counts(), before)  # not even GetServerInfo

    def test_summary_prints_the_effective_llama3_parameters(self):
        stdout, _ = self.ropeload("--random_q_shape=1,4,4,64", "--rope_scaling=llama3",
                                  "--max_len=8192", "-n", "5")
        self.assertIn("llama3(factor=8 low_freq_factor=1 high_freq_factor=4 original=8192)",
                      stdout)

    def test_out_of_range_positions_are_counted_as_out_of_range(self):
        _, report = self.ropeload("--random_q_shape=1,4,2,16", "--max_len=64",
                                  "--start_pos=100", "-n", "20", expect_rc=3)
        codes = {e["code"]: e["count"] for e in report["steps"][0]["errors_by_code"]}
        self.assertEqual(codes, {"OUT_OF_RANGE": 20})

    # -------------------------------------------------------------- rate

    def test_open_loop_rate_is_within_five_percent_at_low_rate(self):
        # 50 req/s for 2 s at constant gaps: 100 arrivals. Counted, not timed.
        stdout, report = self.ropeload("--random_q_shape=1,4,4,32", "--rps=50", "-z", "2s",
                                       "--window=500ms")
        step = report["steps"][0]
        self.assertEqual(report["load"]["mode"], "open")
        self.assertEqual(step["target_rps"], 50)
        self.assertEqual(step["scheduled"], 100)
        self.assertLessEqual(abs(step["ok"] - 100), 5, step)
        self.assertLessEqual(abs(step["offered_rps"] - 50), 2.5, step)
        self.assertTrue(step["rate_reached"], step)
        self.assertIn("rate reached", stdout)

    def test_poisson_arrivals_are_reproducible_from_the_seed(self):
        counts = []
        for _ in range(2):
            _, report = self.ropeload("--random_q_shape=1,1,4,32", "--rps=80", "--poisson",
                                      "--seed=7", "-z", "1s")
            counts.append(report["steps"][0]["scheduled"])
        self.assertEqual(counts[0], counts[1])
        self.assertGreater(counts[0], 40)
        self.assertLess(counts[0], 130)

    # -------------------------------------------------------------- sweeps, SLO

    def test_sweep_stops_at_the_p99_slo(self):
        _, report = self.ropeload("--random_q_shape=1,4,4,32", "--concurrency-range=1:3:1",
                                  "-n", "50", "--max-p99=1us")
        self.assertEqual(len(report["steps"]), 1)
        self.assertTrue(report["slo"]["stopped"])
        self.assertIn("exceeds the SLO", report["slo"]["note"])

    # -------------------------------------------------------------- outputs

    def test_html_report_parses_and_holds_svg_charts(self):
        html_path = os.path.join(self.dir, "report.html")
        csv_path = os.path.join(self.dir, "report.csv")
        _, report = self.ropeload("--random_q_shape=1,4,4,32", "--concurrency-range=1:2",
                                  "-z", "600ms", "--window=150ms", "--html=" + html_path,
                                  "--csv=" + csv_path)
        with open(html_path) as f:
            text = f.read()
        checker = TagBalanceChecker()
        checker.feed(text)
        checker.close()
        self.assertEqual(checker.problems, [])
        self.assertEqual(checker.open_tags, [])
        self.assertGreaterEqual(checker.counts.get("svg", 0), 4)
        self.assertNotIn("<script", text)
        self.assertIsNone(re.search(r'\s(src|href)=', text), "external resource referenced")
        for svg in re.findall(r"<svg.*?</svg>", text, re.S):
            ElementTree.fromstring(svg)  # each chart is well-formed XML
        self.assertIn("Throughput vs latency", text)
        with open(csv_path) as f:
            rows = [line for line in f.read().splitlines() if line]
        self.assertEqual(len(rows), 1 + len(report["steps"]))

    def test_verify_checks_replies_against_the_local_engine(self):
        stdout, report = self.ropeload("--workload=scores", "--random_q_shape=1,8,4,32",
                                       "--random_k_shape=1,8,2,32", "--random_v_shape=1,8,2,16",
                                       "--softmax", "--causal", "--dtype=bfloat16", "-n", "60",
                                       "--verify=3", "--payloads=2")
        verify = report["verify"]
        self.assertEqual(verify["checked"], 3)
        self.assertEqual(verify["matched"], 3, verify["failures"])
        self.assertIn("3 of 3 checked replies match", stdout)

    def test_output_and_lse_only_verify_against_the_local_engine(self):
        # Attention with no Sq x Sk result: the replies carry output and lse.
        stdout, report = self.ropeload("--workload=scores", "--random_q_shape=1,8,4,32",
                                       "--random_k_shape=1,8,2,32", "--random_v_shape=1,8,2,16",
                                       "--causal", "--results=output,lse", "-n", "30",
                                       "--verify=3")
        step = report["steps"][0]
        self.assertEqual(step["errors"], 0, step["errors_by_code"])
        self.assertEqual(report["verify"]["matched"], 3, report["verify"]["failures"])
        self.assertIn("3 of 3 checked replies match", stdout)

    def test_hf_config_rotates_and_verifies_against_the_local_engine(self):
        # Phi-4-mini's published config.json: LongRoPE, partial rotary 96 of
        # 128; positions 4094.. cross original_max_position_embeddings 4096,
        # so the long factors apply, on the server and in the verifier alike.
        config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                              "hf_configs", "Phi-4-mini-instruct.json")
        stdout, report = self.ropeload("--hf_config=" + config, "--max_len=8192", "--layout=half",
                                       "--random_q_shape=1,4,3,128", "--random_k_shape=1,4,1,128",
                                       "--start_pos=4094", "--dtype=bfloat16", "-n", "20",
                                       "--verify=3")
        step = report["steps"][0]
        self.assertEqual(step["errors"], 0, step["errors_by_code"])
        self.assertEqual(report["verify"]["matched"], 3, report["verify"]["failures"])
        self.assertIn("3 of 3 checked replies match", stdout)

    def test_hf_config_takes_the_servers_layout_and_max_len(self):
        # No --layout / --max_len: the server's ResolveConfig says them
        # (Llama 3.1: rotate_half, max_position_embeddings 131072), and the
        # summary's config line says where they came from.
        config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                              "hf_configs", "Llama-3.1-8B-Instruct.json")
        stdout, report = self.ropeload("--hf_config=" + config, "--random_q_shape=1,2,2,128",
                                       "--start_pos=131070", "-n", "5", "--verify=2")
        step = report["steps"][0]
        self.assertEqual(step["errors"], 0, step["errors_by_code"])
        self.assertEqual(report["verify"]["matched"], 2, report["verify"]["failures"])
        self.assertIn("layout=half (the server's hf_layout for model_type llama) max_len=131072 "
                      "(the server's max_position_embeddings for model_type llama)", stdout)
        self.assertIn("max_len=131072 layout=half", report["workload"]["config"])

    # -------------------------------------------------------------- configs

    def check_one_table_per_config(self, rpc, configs, *flags):
        misses = self.server.gauge("rope_table_cache_misses_total")
        before = self.server.request_counts()
        stdout, report = self.ropeload("--configs=%d" % configs, *flags)
        after = self.server.request_counts()
        step = report["steps"][0]
        self.assertEqual(step["errors"], 0, step["errors_by_code"])
        self.assertEqual(delta(before, after, rpc, "OK"), step["ok"] + step["warmup"]["ok"])
        # Every config is its own table: one build each, no more.
        self.assertEqual(self.server.gauge("rope_table_cache_misses_total") - misses, configs)
        self.assertEqual(report["verify"]["matched"], report["verify"]["checked"],
                         report["verify"]["failures"])
        self.assertIn("%d configs" % configs, stdout)

    def test_configs_build_one_server_table_per_config(self):
        self.check_one_table_per_config(
            "Rotate", 7, "--random_q_shape=1,4,2,32", "--random_k_shape=1,4,1,32",
            "--payloads=2", "-c", "2", "-n", "56", "--verify=14")

    def test_configs_churn_within_one_rotate_stream(self):
        self.check_one_table_per_config(
            "RotateStream", 5, "--workload=rotate_stream", "--random_q_shape=1,4,2,32",
            "-c", "1", "-n", "25", "--verify=5")
    # -------------------------------------------------------------- drain

    def test_closed_loop_loses_no_accepted_call_when_its_server_drains(self):
        """SIGTERM mid-run: every call the server completed reaches ropeload as OK.

        Once the server drains, each new call fails at once and ropeload's
        streams end under it; ropeload must keep running, count only
        UNAVAILABLE refusals, and receive every reply the server sent
        (bench/drain.sh runs the heavier scenarios).
        """
        json_path = os.path.join(self.dir, "report.json")
        cmd = [ARGS.ropeload, "--target=" + self.server.address, "--noprogress",
               "--json=" + json_path, "--workload=rotate_stream", "--random_q_shape=1,16,8,64",
               "-c", "16", "--connections=2", "-z", "4s", "--max_error_rate=1"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            # SIGTERM once calls are answered (not after a fixed second, which
            # an ASan ropeload on a busy machine may spend starting up).
            wait_for(lambda: self.server.request_counts().get(("RotateStream", "OK"), 0),
                     lambda ok: ok > 0, 30)
            self.server.proc.send_signal(signal.SIGTERM)
            # The server's last counts: scraped while draining with no call
            # in flight (nothing is admitted once draining has begun).
            final_ok = None
            deadline = time.monotonic() + 30
            while self.server.proc.poll() is None and time.monotonic() < deadline:
                try:
                    page = self.server.metrics_page()
                    if (self.server.gauge("rope_draining", page) == 1 and
                            self.server.gauge("rope_calls_in_flight", page) == 0):
                        final_ok = self.server.request_counts(page).get(("RotateStream", "OK"))
                except (OSError, KeyError):
                    pass  # the endpoint is going away with the server
                time.sleep(0.02)
            self.assertEqual(self.server.proc.wait(timeout=30), 0)
            out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 0, out)
        with open(json_path) as f:
            step = json.load(f)["steps"][0]
        self.assertEqual({e["code"] for e in step["errors_by_code"]} - {"UNAVAILABLE"}, set(),
                         step["errors_by_code"])
        self.assertIsNotNone(final_ok, "no scrape while draining with no call in flight")
        self.assertGreater(step["ok"], 0)
        self.assertEqual(step["ok"] + step["warmup"]["ok"], final_ok)


VOID_ELEMENTS = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr",
                 "source", "track", "embed", "param"}


class TagBalanceChecker(html.parser.HTMLParser):
    """Checks that every non-void element is closed, in order."""

    def __init__(self):
        super().__init__()
        self.open_tags = []
        self.problems = []
        self.counts = {}

    def handle_starttag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag not in VOID_ELEMENTS:
            self.open_tags.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1

    def handle_endtag(self, tag):
        if not self.open_tags or self.open_tags[-1] != tag:
            self.problems.append("unexpected </%s> (open: %s)" % (tag, self.open_tags[-3:]))
            return
        self.open_tags.pop()


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--ropeload", required=True)
    parser.add_argument("--workdir", required=True)
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.workdir, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
