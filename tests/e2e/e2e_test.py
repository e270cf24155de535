#!/usr/bin/python3
"""End-to-end test: a real ropeserve process driven by ropectl and Python.

Starts ropeserve on 127.0.0.1:0 (RopeServe from
tests/support/python/ropeserve_process.py, which ctest puts on PYTHONPATH),
runs ropectl health / info / rotate / scores / table with random and .npy
inputs, checks exit codes and compares the .npy outputs with a float64 NumPy
reference (the formulas of client/python/rope_client_example.py), runs that
example against the server, checks error exits, then sends SIGTERM and
expects exit status 0. Every wait is bounded.

Exit status: 0 pass, 1 fail, 77 skipped (no NumPy).
"""

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys

from ropeserve_process import RopeServe, StartError, unix_socket_path

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not available to %s" % sys.executable)
    sys.exit(77)

COMMAND_TIMEOUT_S = 60


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


class Driver:
    def __init__(self, args, server, reference, socket):
        self.ropectl = args.ropectl
        self.socket = socket
        self.example = args.example
        self.work = args.workdir
        self.target = "--target=" + server.address
        self.ref = reference
        self.passed = 0

    def path(self, name):
        return os.path.join(self.work, name)

    def ropectl_run(self, *args, expect=0):
        cmd = [self.ropectl, args[0], self.target, "--deadline=20s"] + list(args[1:])
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        check(result.returncode == expect,
              "%s exited %d, want %d\nstdout: %s\nstderr: %s"
              % (" ".join(cmd), result.returncode, expect, result.stdout, result.stderr))
        return result

    def ok(self, name):
        self.passed += 1
        print("ok    " + name)

    def close(self, name, got, want, tol):
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        check(got.shape == want.shape, "%s: shape %s, want %s" % (name, got.shape, want.shape))
        finite = np.isfinite(want)
        check(np.array_equal(np.isfinite(got), finite) and np.array_equal(got[~finite], want[~finite]),
              "%s: non-finite entries differ" % name)
        err = float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))
        check(err <= tol, "%s: max|err| %.3g > %.3g" % (name, err, tol))

    # ---- the checks ----

    def health_and_info(self):
        r = self.ropectl_run("health")
        check(r.stdout.strip() == "SERVING", "health printed %r" % r.stdout)
        r = self.ropectl_run("info")
        check("backend:  cpu" in r.stdout, "info lacks the backend: %s" % r.stdout)
        check("table cache:" in r.stdout and "max_len_cap=" in r.stdout, "info output: %s" % r.stdout)
        self.ok("ropectl health / info")

    def rotate_npy(self):
        rng = np.random.default_rng(5)
        b, s, hq, hkv, d = 2, 4, 4, 2, 16
        q = rng.standard_normal((b, s, hq, d)).astype(np.float32)
        k = rng.standard_normal((b, s, hkv, d)).astype(np.float32)
        np.save(self.path("q.npy"), q)
        np.save(self.path("k.npy"), k)
        positions = [3, 0, 17, 9]
        for layout, rotary_dim in (("interleaved", 16), ("half", 16), ("half", 8)):
            self.ropectl_run("rotate", "--q=" + self.path("q.npy"), "--k=" + self.path("k.npy"),
                             "--layout=" + layout, "--rotary_dim=%d" % rotary_dim, "--theta=500000",
                             "--max_len=64", "--positions=" + ",".join(map(str, positions)),
                             "--out_q=" + self.path("q_rot.npy"), "--out_k=" + self.path("k_rot.npy"))
            half = layout == "half"
            q_rot = np.load(self.path("q_rot.npy"))
            k_rot = np.load(self.path("k_rot.npy"))
            check(q_rot.dtype == np.float32, "q_rot dtype %s" % q_rot.dtype)
            self.close("rotate q %s r=%d" % (layout, rotary_dim), q_rot,
                       self.ref.rotate(q, np.array(positions), 500000.0, rotary_dim, half), 1e-5)
            self.close("rotate k %s r=%d" % (layout, rotary_dim), k_rot,
                       self.ref.rotate(k, np.array(positions), 500000.0, rotary_dim, half), 1e-5)
        self.ok("ropectl rotate .npy float32 (interleaved, half, partial, GQA) matches numpy")

    def rotate_npy_half_precision(self):
        rng = np.random.default_rng(6)
        x = rng.uniform(-1, 1, (1, 3, 2, 8)).astype(np.float16)
        np.save(self.path("q16.npy"), x)
        self.ropectl_run("rotate", "--q=" + self.path("q16.npy"), "--start_pos=2",
                         "--out_q=" + self.path("q16_rot.npy"))
        out = np.load(self.path("q16_rot.npy"))
        check(out.dtype == np.float16, "float16 input gave %s output" % out.dtype)
        self.close("rotate float16", out, self.ref.rotate(x.astype(np.float32), 2 + np.arange(3),
                                                          10000.0, 8, False), 2e-3)
        # bfloat16 as raw '<u2' bits: round float32 to nearest even by hand.
        x32 = rng.uniform(-1, 1, (1, 3, 2, 8)).astype(np.float32)
        u = x32.view(np.uint32).astype(np.uint64)
        bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        np.save(self.path("qbf.npy"), bits)
        self.ropectl_run("rotate", "--q=" + self.path("qbf.npy"), expect=2)  # needs --dtype
        self.ropectl_run("rotate", "--q=" + self.path("qbf.npy"), "--dtype=bfloat16", "--start_pos=2",
                         "--out_q=" + self.path("qbf_rot.npy"))
        out = np.load(self.path("qbf_rot.npy"))
        check(out.dtype == np.uint16, "bfloat16 output dtype %s, want uint16 bits" % out.dtype)
        as_f32 = (out.astype(np.uint32) << 16).view(np.float32)
        x_bf = (bits.astype(np.uint32) << 16).view(np.float32)
        self.close("rotate bfloat16", as_f32, self.ref.rotate(x_bf, 2 + np.arange(3), 10000.0, 8, False),
                   1.6e-2)
        self.ok("ropectl rotate .npy float16 and bfloat16 ('<u2') match numpy")

    def rotate_shm_over_unix_socket(self):
        # ropectl --shm over the Unix socket: q and k by shared-memory reference.
        rng = np.random.default_rng(16)
        q = rng.standard_normal((1, 5, 4, 16)).astype(np.float32)
        k = rng.standard_normal((1, 5, 2, 16)).astype(np.float32)
        np.save(self.path("sq.npy"), q)
        np.save(self.path("sk.npy"), k)
        cmd = [self.ropectl, "rotate", "--target=unix://" + self.socket, "--deadline=20s",
               "--shm", "--q=" + self.path("sq.npy"), "--k=" + self.path("sk.npy"), "--start_pos=4",
               "--layout=half", "--max_len=64", "--out_q=" + self.path("sq_rot.npy"),
               "--out_k=" + self.path("sk_rot.npy")]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        check(result.returncode == 0, "%s exited %d: %s" % (" ".join(cmd), result.returncode, result.stderr))
        check("(shared memory)" in result.stdout, "ropectl --shm output: %s" % result.stdout)
        positions = 4 + np.arange(5)
        self.close("rotate --shm q", np.load(self.path("sq_rot.npy")),
                   self.ref.rotate(q, positions, 10000.0, 16, True), 1e-5)
        self.close("rotate --shm k", np.load(self.path("sk_rot.npy")),
                   self.ref.rotate(k, positions, 10000.0, 16, True), 1e-5)
        self.ok("ropectl rotate --shm over the Unix socket matches numpy")

    def rotate_random(self):
        self.ropectl_run("rotate", "--random_q_shape=2,6,4,16", "--random_k_shape=2,6,1,16", "--seed=3",
                         "--start_pos=5", "--out_q=" + self.path("rq.npy"), "--out_k=" + self.path("rk.npy"))
        rq = np.load(self.path("rq.npy"))
        check(rq.shape == (2, 6, 4, 16) and np.load(self.path("rk.npy")).shape == (2, 6, 1, 16),
              "random rotate output shapes")
        # The inputs are not written out; check consistency instead: undo the
        # rotation on the server, then redo it with numpy.
        self.ropectl_run("rotate", "--q=" + self.path("rq.npy"), "--start_pos=5", "--inverse",
                         "--out_q=" + self.path("rq_back.npy"))
        back = np.load(self.path("rq_back.npy"))
        self.close("random rotate, inverse, numpy forward",
                   self.ref.rotate(back, 5 + np.arange(6), 10000.0, 16, False), rq, 2e-5)
        self.ok("ropectl rotate random inputs and --inverse")

    def scores(self):
        rng = np.random.default_rng(8)
        q = rng.standard_normal((1, 5, 4, 16)).astype(np.float32)
        k = rng.standard_normal((1, 6, 2, 16)).astype(np.float32)
        v = rng.standard_normal((1, 6, 2, 8)).astype(np.float32)
        for name, a in (("sq.npy", q), ("sk.npy", k), ("sv.npy", v)):
            np.save(self.path(name), a)
        self.ropectl_run("scores", "--q=" + self.path("sq.npy"), "--k=" + self.path("sk.npy"),
                         "--v=" + self.path("sv.npy"), "--q_start_pos=1", "--k_start_pos=0", "--causal",
                         "--softmax", "--layout=half", "--out=" + self.path("p.npy"),
                         "--out_output=" + self.path("o.npy"))
        want_p, want_o = self.ref.attention(q, k, v, 1, 0, 10000.0, True, True, True, 0.25)
        self.close("scores softmax", np.load(self.path("p.npy")), want_p, 1e-5)
        self.close("scores output", np.load(self.path("o.npy")), want_o, 1e-5)
        self.ropectl_run("scores", "--q=" + self.path("sq.npy"), "--k=" + self.path("sk.npy"), "--causal",
                         "--scale=1", "--out=" + self.path("s.npy"))
        want_s, _ = self.ref.attention(q, k, None, 0, 0, 10000.0, False, True, False, 1.0)
        self.close("scores raw causal", np.load(self.path("s.npy")), want_s, 2e-5)
        r = self.ropectl_run("scores", "--random_q_shape=1,8,4,32", "--random_k_shape=1,8,4,32", "--causal",
                             "--softmax")
        check("probs : float32 [1,4,8,8]" in r.stdout, "random scores summary: %s" % r.stdout)
        self.ok("ropectl scores .npy (causal softmax, v, GQA) matches numpy; random inputs")

    def attend_results(self):
        """ropectl attend / scores with masks, sinks and every result, each .npy
        against numpy (float64, from the formulas)."""
        rng = np.random.default_rng(9)
        q = rng.standard_normal((1, 6, 4, 16)).astype(np.float32)
        k = rng.standard_normal((1, 9, 2, 16)).astype(np.float32)
        v = rng.standard_normal((1, 9, 2, 8)).astype(np.float32)
        for name, a in (("aq.npy", q), ("ak.npy", k), ("av.npy", v)):
            np.save(self.path(name), a)
        sinks = np.array([0.5, -0.25, 0.125, 0.0])
        q_start, window_left, scale = 3, 4, 0.25
        # Raw logits, then the causal mask and the window by position.
        s, _ = self.ref.attention(q, k, None, q_start, 0, 10000.0, True, False, False, scale)
        q_pos = q_start + np.arange(6)[:, None]
        k_pos = np.arange(9)[None, :]
        hidden = (k_pos > q_pos) | (q_pos - k_pos > window_left)
        s = np.where(hidden[None, None], -np.inf, s)
        lse = np.log(np.exp(s).sum(axis=-1) + np.exp(sinks)[None, :, None])
        p = np.exp(s - lse[..., None])
        out = np.einsum("bhij,bjhd->bihd", p, np.repeat(v.astype(np.float64), 2, axis=2))
        order = np.argsort(-p, axis=-1, kind="stable")[..., :3]  # ties to the smaller index
        self.ropectl_run("attend", "--q=" + self.path("aq.npy"), "--k=" + self.path("ak.npy"),
                         "--v=" + self.path("av.npy"), "--layout=half", "--q_start_pos=%d" % q_start,
                         "--causal", "--window_left=%d" % window_left, "--scale=%g" % scale,
                         "--sinks=" + ",".join("%g" % x for x in sinks),
                         "--results=output,lse,top_k,key_mass,score_rows", "--top_k=3",
                         "--score_rows_start=2", "--score_rows_count=3",
                         "--out_output=" + self.path("a_out.npy"), "--out_lse=" + self.path("a_lse.npy"),
                         "--out_top_k_indices=" + self.path("a_idx.npy"),
                         "--out_top_k_probs=" + self.path("a_top.npy"),
                         "--out_key_mass=" + self.path("a_mass.npy"),
                         "--out_score_rows=" + self.path("a_rows.npy"))
        self.close("attend output", np.load(self.path("a_out.npy")), out, 1e-5)
        self.close("attend lse", np.load(self.path("a_lse.npy")), lse, 1e-5)
        idx = np.load(self.path("a_idx.npy"))
        check(idx.dtype == np.int32, "top_k_indices dtype %s, want int32" % idx.dtype)
        check(np.array_equal(idx, order), "top_k_indices %s, want %s" % (idx.tolist(), order.tolist()))
        self.close("attend top_k_probs", np.load(self.path("a_top.npy")),
                   np.take_along_axis(p, order, axis=-1), 1e-5)
        self.close("attend key_mass", np.load(self.path("a_mass.npy")), p.sum(axis=2), 1e-5)
        self.close("attend score_rows", np.load(self.path("a_rows.npy")), s[:, :, 2:5, :], 2e-5)
        # Without v, attend's default results (output, lse) are refused by the
        # server; an --out_* flag for a result not asked is a usage error.
        r = self.ropectl_run("attend", "--q=" + self.path("aq.npy"), "--k=" + self.path("ak.npy"),
                             expect=1)
        check("INVALID_ARGUMENT" in r.stderr and "v is absent" in r.stderr, r.stderr)
        r = self.ropectl_run("scores", "--q=" + self.path("aq.npy"), "--k=" + self.path("ak.npy"),
                             "--results=lse", "--out=" + self.path("a_s.npy"), expect=2)
        check("--out given but --results does not ask for scores" in r.stderr, r.stderr)
        self.ok("ropectl attend masks, sinks and every result (.npy, int32 top-k) match numpy")

    def table(self):
        self.ropectl_run("table", "--head_dim=16", "--rotary_dim=8", "--theta=10000", "--max_len=64",
                         "--start=5", "--count=10", "--out_cos=" + self.path("cos.npy"),
                         "--out_sin=" + self.path("sin.npy"))
        angle = np.outer(5 + np.arange(10), self.ref.inv_freq(10000.0, 8))
        self.close("table cos", np.load(self.path("cos.npy")), np.cos(angle), 1e-7)
        self.close("table sin", np.load(self.path("sin.npy")), np.sin(angle), 1e-7)
        self.ok("ropectl table matches cos/sin of pos * inv_freq")

    def scaled_tables(self):
        """ropectl --rope-scaling=... against numpy versions of Hugging Face's formulas."""
        def plain(theta, dim):
            return 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)

        def llama3(theta, dim, factor=8.0, low=1.0, high=4.0, orig=8192.0):
            inv = plain(theta, dim)
            wavelen = 2 * np.pi / inv
            out = np.where(wavelen > orig / low, inv / factor, inv)
            smooth = (orig / wavelen - low) / (high - low)
            smoothed = (1 - smooth) * out / factor + smooth * out
            medium = ~(wavelen < orig / high) & ~(wavelen > orig / low)
            return np.where(medium, smoothed, out), 1.0

        def yarn(theta, dim, factor, orig, beta_fast=32.0, beta_slow=1.0):
            def corr(n):
                return dim * np.log(orig / (n * 2 * np.pi)) / (2 * np.log(theta))
            low, high = max(np.floor(corr(beta_fast)), 0), min(np.ceil(corr(beta_slow)), dim - 1)
            ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
            inv = plain(theta, dim)
            return inv / factor * ramp + inv * (1 - ramp), 0.1 * np.log(factor) + 1.0

        def longrope(theta, dim, ext, max_len, orig):
            s = max_len / orig
            attn = 1.0 if s <= 1 else np.sqrt(1 + np.log(s) / np.log(orig))
            return plain(theta, dim) / np.array(ext), attn

        long_f = [1.0 + 0.5 * i for i in range(8)]
        short_f = [1.0 + 0.1 * i for i in range(8)]
        cases = [
            ("llama3", ["--rope-scaling=llama3", "--theta=500000", "--head_dim=128",
                        "--max_len=16384"], llama3(500000.0, 128), 16384),
            ("yarn", ["--rope-scaling=yarn", "--factor=4", "--original_max_position_embeddings=256",
                      "--theta=10000", "--head_dim=64", "--max_len=1024"],
             yarn(10000.0, 64, 4.0, 256.0), 1024),
            ("longrope", ["--rope-scaling=longrope", "--original_max_position_embeddings=64",
                          "--short_factor=" + ",".join(map(str, short_f)),
                          "--long_factor=" + ",".join(map(str, long_f)),
                          "--theta=10000", "--head_dim=16", "--max_len=512"],
             longrope(10000.0, 16, long_f, 512, 64), 512),
        ]
        for name, flags, (inv, attn), max_len in cases:
            self.ropectl_run("table", *flags, "--start=%d" % (max_len - 10), "--count=10",
                             "--out_cos=" + self.path(name + "_cos.npy"),
                             "--out_sin=" + self.path(name + "_sin.npy"))
            angle = np.outer(max_len - 10 + np.arange(10), inv)
            self.close(name + " cos", np.load(self.path(name + "_cos.npy")), attn * np.cos(angle), 3e-7)
            self.close(name + " sin", np.load(self.path(name + "_sin.npy")), attn * np.sin(angle), 3e-7)
        r = self.ropectl_run("info")
        check("llama3" in r.stdout and "longrope" in r.stdout, "info lists scalings: %s" % r.stdout)
        check("attention: results SCORES, OUTPUT, LSE, TOP_K, KEY_MASS, SCORE_ROWS; masks causal, "
              "window_left, window_right, chunk_size; transforms softcap, alibi_slopes, sinks"
              in r.stdout, "info lists attention: %s" % r.stdout)
        r = self.ropectl_run("rotate", "--random_q_shape=1,2,2,8", "--rope-scaling=linear",
                             "--factor=2", "--beta_fast=3", expect=2)
        check("--beta_fast does not apply to --rope_scaling=linear" in r.stderr,
              "misplaced scaling flag stderr: %r" % r.stderr)
        r = self.ropectl_run("rotate", "--random_q_shape=1,2,2,8", "--rope-scaling=yarn",
                             "--factor=2", expect=1)
        check("INVALID_ARGUMENT" in r.stderr and "config.yarn.original_max_position_embeddings" in r.stderr,
              "yarn without original length stderr: %r" % r.stderr)
        self.ok("ropectl --rope-scaling llama3 / yarn / longrope tables match numpy; bad flags refused")

    def python_example(self):
        result = subprocess.run([sys.executable, self.example, self.target.split("=", 1)[1]],
                                capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S * 2)
        check(result.returncode == 0, "python example exited %d\n%s\n%s"
              % (result.returncode, result.stdout, result.stderr))
        check("all checks passed" in result.stdout, "python example output: %s" % result.stdout)
        self.ok("python example (Rotate + AttentionScores vs numpy)")

    def errors(self):
        r = self.ropectl_run("rotate", "--random_q_shape=1,2,2,8", "--head_dim=7", expect=1)
        check("INVALID_ARGUMENT" in r.stderr and "head_dim" in r.stderr and r.stderr.count("\n") == 1,
              "bad head_dim stderr: %r" % r.stderr)
        r = self.ropectl_run("rotate", "--random_q_shape=1,2,2,8", "--start_pos=4095", expect=1)
        check("OUT_OF_RANGE" in r.stderr, "position past max_len stderr: %r" % r.stderr)
        r = self.ropectl_run("scores", "--random_q_shape=1,2,3,8", "--random_k_shape=1,2,2,8", expect=1)
        check("INVALID_ARGUMENT" in r.stderr, "Hq %% Hkv stderr: %r" % r.stderr)
        r = self.ropectl_run("rotate", "--random_q_shape=1,2,2,8", "--no_such_flag", expect=2)
        check("unknown flag --no_such_flag" in r.stderr, "unknown flag stderr: %r" % r.stderr)
        # The server is still fine after bad requests.
        self.ropectl_run("health")
        self.ok("ropectl error exits (INVALID_ARGUMENT, OUT_OF_RANGE, usage)")


def load_reference(example_path):
    spec = importlib.util.spec_from_file_location("rope_client_example", example_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--ropectl", required=True)
    parser.add_argument("--example", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    reference = load_reference(args.example)
    with unix_socket_path() as socket:
        return run(args, reference, socket)


def run(args, reference, socket):
    try:
        server = RopeServe(args.ropeserve, ["--backend=cpu", "--cpu_threads=1", "--work_threads=2",
                                            "--shutdown_grace_period=5s"],
                           listen="127.0.0.1:0,unix://" + socket)
    except StartError as e:
        print("FAIL  %s" % e)
        return 1
    print("ropeserve at %s (pid %d)" % (server.address, server.proc.pid))
    driver = Driver(args, server, reference, socket)
    try:
        driver.health_and_info()
        driver.rotate_npy()
        driver.rotate_npy_half_precision()
        driver.rotate_random()
        driver.rotate_shm_over_unix_socket()
        driver.scores()
        driver.attend_results()
        driver.table()
        driver.scaled_tables()
        driver.python_example()
        driver.errors()
        code = server.stop()
        check(code == 0, "ropeserve exited %s after SIGTERM, want 0" % code)
        driver.ok("ropeserve exits 0 on SIGTERM")
        driver.ropectl_run("health", expect=1)
        driver.ok("ropectl health fails once the server is gone")
    except (Failure, subprocess.TimeoutExpired) as e:
        print("FAIL  %s" % e)
        server.stop()
        return 1
    finally:
        server.kill()
    print("e2e: %d checks passed" % driver.passed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
