#!/usr/bin/env python3
"""scripts/gpu_check.sh, as far as it runs without a GPU.

- `run` (and no mode at all) without a bundle fails at once, printing the
  two steps that work on the lent GPU machine, and writes nothing but $OUT.
- find-cublas finds libcublas.so.13 in a CUDA 13 wheel's nvidia/cu13/lib
  under any nvidia.__path__ entry, else by searching, and says which.
- With --build-dir (a Release CUDA build with the service and benchmarks):
  the dry run. `pack` bundles that build; the bundle holds the binaries and
  the libraries the GPU machine lacks, nothing of the C runtime, the driver
  or cuBLAS, and fits the device tool's 64 MiB carry limit together with
  the source tree; `run` from it completes (device tests skipping) with
  every result in $OUT and nothing written to bench/results.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
import unittest

ARGS = None
CARRY_LIMIT = 64 << 20
FILES = ["rope_cuda_backend_test", "rope_cuda_loader_test", "cuda_bench", "ropeserve",
         "service_bench", "librope_cuda.so"]
NEVER_BUNDLED = ["libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "ld-linux", "libcuda.so",
                 "libcublas"]


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(ARGS.script)))


def run_script(args, env_extra, timeout=60, drop=("BUILD_DIR", "BUNDLE", "OUT")):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra)
    start = time.monotonic()
    proc = subprocess.run([ARGS.script] + args, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)
    return proc, time.monotonic() - start


def fresh_dir(name):
    path = os.path.join(ARGS.workdir, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def python_has_nvidia(env_extra):
    env = dict(os.environ)
    env.update(env_extra)
    return subprocess.run(["python3", "-c", "import nvidia"], env=env,
                          stderr=subprocess.DEVNULL).returncode == 0


class NoBundleTest(unittest.TestCase):

    def check_refused(self, mode_args):
        work = fresh_dir("no_bundle")
        build_dir = os.path.join(work, "build-gpu")
        out = os.path.join(work, "out")
        proc, seconds = run_script(mode_args, {"BUILD_DIR": build_dir, "OUT": out})
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertLess(seconds, 10, "it should fail at once, not try to build")
        bundle = os.path.join(build_dir, "gpu_bundle.tar.gz")
        self.assertIn("no bundle at %s" % bundle, proc.stderr)
        self.assertIn("1. here:   scripts/gpu_check.sh bundle", proc.stderr)
        self.assertIn('run(command="scripts/gpu_check.sh run", carry=["%s"], timeout_s=420)'
                      % bundle, proc.stderr)
        self.assertIn("find_package(absl)", proc.stderr)
        # Nothing but $OUT is written; the log there says the same.
        self.assertEqual(sorted(os.listdir(work)), ["out"])
        self.assertEqual(os.listdir(out), ["gpu_check.log"])
        with open(os.path.join(out, "gpu_check.log")) as log:
            self.assertIn("scripts/gpu_check.sh bundle", log.read())

    def test_run_without_a_bundle_prints_the_two_steps(self):
        self.check_refused(["run"])

    def test_default_mode_is_run(self):
        self.check_refused([])

    def test_default_bundle_path_is_the_one_to_carry(self):
        build_gpu = os.path.join(repo_root(), "build-gpu")
        if os.path.exists(os.path.join(build_gpu, "gpu_bundle.tar.gz")):
            self.skipTest("this checkout has a build-gpu/gpu_bundle.tar.gz")
        existed = os.path.exists(build_gpu)
        work = fresh_dir("default_path")
        proc, _ = run_script(["run"], {"OUT": os.path.join(work, "out")})
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn('carry=["build-gpu/gpu_bundle.tar.gz"]', proc.stderr)
        self.assertEqual(os.path.exists(build_gpu), existed)

    def test_unknown_mode_is_a_usage_error(self):
        work = fresh_dir("usage")
        proc, _ = run_script(["deploy"], {"OUT": os.path.join(work, "out")})
        self.assertEqual(proc.returncode, 2)
        self.assertIn("usage:", proc.stderr)


class FindCublasTest(unittest.TestCase):

    def find(self, env_extra):
        env = {"CUDA_HOME": "/nonexistent-cuda", "PYTHONNOUSERSITE": "1",
               "OUT": os.path.join(ARGS.workdir, "find_cublas_out")}
        env.update(env_extra)
        if python_has_nvidia({k: v for k, v in env.items() if k != "PYTHONPATH"}):
            self.skipTest("this machine's python3 has an nvidia package of its own")
        return run_script(["find-cublas"], env)[0]

    def test_finds_the_cuda13_wheel_under_any_nvidia_path_entry(self):
        work = fresh_dir("wheels")
        # Two site directories hold parts of the nvidia namespace package;
        # only the second has the CUDA 13 libraries.
        first = os.path.join(work, "site1", "nvidia", "cudnn")
        second = os.path.join(work, "site2", "nvidia", "cu13", "lib")
        os.makedirs(first)
        os.makedirs(second)
        open(os.path.join(second, "libcublas.so.13"), "w").close()
        proc = self.find({"PYTHONPATH": "%s:%s" % (os.path.join(work, "site1"),
                                                   os.path.join(work, "site2")),
                          "CUBLAS_SEARCH_ROOTS": work})
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("libcublas.so.13 from the CUDA 13 wheel (nvidia.__path__): %s" % second,
                      proc.stdout)

    def test_falls_back_to_a_search(self):
        work = fresh_dir("search")
        lib = os.path.join(work, "somewhere", "lib")
        os.makedirs(lib)
        open(os.path.join(lib, "libcublas.so.13"), "w").close()
        proc = self.find({"PYTHONPATH": "", "CUBLAS_SEARCH_ROOTS": work})
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("libcublas.so.13 found by searching: %s" % lib, proc.stdout)

    def test_says_when_there_is_none(self):
        work = fresh_dir("none")
        proc = self.find({"PYTHONPATH": "", "CUBLAS_SEARCH_ROOTS": work})
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn("libcublas.so.13 not found", proc.stdout)


class DryRunTest(unittest.TestCase):

    def setUp(self):
        if ARGS.build_dir is None:
            self.skipTest("no --build-dir: not a Release CUDA build with service and benchmarks")

    def tracked_bytes(self):
        root = repo_root()
        listed = subprocess.run(["git", "-C", root, "ls-files", "-z"], stdout=subprocess.PIPE)
        if listed.returncode != 0:
            return 0
        total = 0
        for name in listed.stdout.decode().split("\0"):
            path = os.path.join(root, name)
            if name and os.path.isfile(path):
                total += os.path.getsize(path)
        return total

    def test_pack_then_run_from_the_bundle(self):
        work = fresh_dir("dry_run")
        bundle = os.path.join(work, "gpu_bundle.tar.gz")
        results = os.path.join(repo_root(), "bench", "results")
        results_before = sorted(os.listdir(results)) if os.path.isdir(results) else []

        proc, _ = run_script(["pack"], {"BUILD_DIR": ARGS.build_dir, "BUNDLE": bundle,
                                        "OUT": os.path.join(work, "pack_out")}, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        with tarfile.open(bundle) as tar:
            names = tar.getnames()
        binaries = sorted(n[4:] for n in names if n.startswith("bin/") and len(n) > 4)
        self.assertEqual(binaries, sorted(FILES))
        libraries = [n[4:] for n in names if n.startswith("lib/") and len(n) > 4]
        self.assertTrue(any(n.startswith("libabsl_") for n in libraries), libraries)
        self.assertTrue(any(n.startswith("libgrpc++") for n in libraries), libraries)
        self.assertTrue(any(n.startswith("libcudart.so") for n in libraries), libraries)
        for name in libraries:
            for never in NEVER_BUNDLED:
                self.assertFalse(name.startswith(never), "%s is bundled" % name)
        size = os.path.getsize(bundle)
        tree = self.tracked_bytes()
        print("bundle: %.1f MiB, %d libraries; tracked tree %.1f MiB"
              % (size / 2**20, len(libraries), tree / 2**20))
        self.assertLess(size + tree, CARRY_LIMIT,
                        "the bundle and the tree exceed the device tool's 64 MiB carry limit")

        out = os.path.join(work, "run_out")
        proc, _ = run_script(["run"], {"BUILD_DIR": os.path.join(work, "no_build"),
                                       "BUNDLE": bundle, "OUT": out}, timeout=400)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("running from the carried bundle", proc.stdout)
        self.assertIn("libcublas.so.13 ", proc.stdout)
        self.assertIn("plugin loader test: exit 0", proc.stdout)
        self.assertIn("CUDA backend tests: exit 0", proc.stdout)
        self.assertIn("ropeserve --backend=cuda did not start (expected without a GPU)",
                      proc.stdout)
        produced = sorted(os.listdir(out))
        for name in ["gpu_check.log", "cuda_backend_test.log", "cuda_backend_test.xml"]:
            self.assertIn(name, produced)
        self.assertFalse(os.path.exists(os.path.join(work, "no_build")))
        after = sorted(os.listdir(results)) if os.path.isdir(results) else []
        self.assertEqual(after, results_before, "run wrote to bench/results")


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--build-dir", dest="build_dir")
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.workdir, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
