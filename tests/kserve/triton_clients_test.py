#!/usr/bin/python3
"""ropeserve's KServe v2 / Triton front end driven by the real clients from PyPI.

Sets up (once, cached in --venv) a virtual environment over Debian's Python
(--system-site-packages: grpcio, protobuf and NumPy come from Debian) with
  tritonclient[grpc]==2.50.0   its gRPC client, shared-memory utilities,
                               the stubs generated from Triton's published
                               grpc_service.proto, and the perf_analyzer
                               binary (the last release whose binary runs on
                               Debian 12's glibc 2.36; later ones need 2.38,
                               and PyPI's perf-analyzer package is an empty
                               placeholder)
  nvidia-cuda-runtime-cu12     libcudart.so.12, which perf_analyzer loads
                               (no GPU needed)
perf_analyzer also needs Debian's libb64-0d (scripts/setup.sh installs it).
Then, against a real ropeserve on 127.0.0.1 with a model repository:
  1. tritonclient_checks.py (in the venv): every call through tritonclient's
     InferenceServerClient, results equal to the rope.v1 RPCs bit for bit,
     system shared memory through tritonclient.utils.shared_memory;
  2. wire_compat_check.py: every message, field and method of
     proto/inference matches Triton's published files (as compiled into
     tritonclient's service_pb2 / model_config_pb2);
  3. client/examples/kserve/rotate_with_triton_stubs.py: a rotation with
     nothing but the published stubs;
  4. perf_analyzer: ModelInfer with bytes, and ModelStreamInfer; its system
     shared-memory mode is refused (its output regions are sparse objects,
     which ropeserve refuses), and the test holds that refusal.

Exit status: 0 pass; 1 fail; 77 skipped (PyPI unreachable: the reason is
printed). Every command is bounded in time.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

from ropeserve_process import RopeServe

PACKAGES = ["tritonclient[grpc]==2.50.0", "grpcio==1.66.2", "nvidia-cuda-runtime-cu12==12.9.79"]
PIP_TIMEOUT_S = 600
CHECK_TIMEOUT_S = 180
PERF_TIMEOUT_S = 120
HERE = os.path.dirname(os.path.abspath(__file__))


class Skip(Exception):
    pass


def run(cmd, timeout, env=None):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def ensure_venv(venv):
    """The venv with PACKAGES, reused when its marker names the same list."""
    marker = os.path.join(venv, "ropeserve-packages.txt")
    wanted = "\n".join(PACKAGES) + "\n"
    if os.path.exists(marker) and open(marker).read() == wanted:
        print("venv %s: cached" % venv)
        return
    shutil.rmtree(venv, ignore_errors=True)
    start = time.monotonic()
    made = run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], 120)
    if made.returncode != 0:
        raise RuntimeError("python3 -m venv failed (Debian: python3-venv):\n" + made.stderr)
    # A short connection timeout and one retry: an unreachable index is
    # known in under a minute instead of pip's default of several.
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check",
           "--no-input", "--progress-bar", "off", "--timeout", "20", "--retries", "1"]
    installed = run(pip + PACKAGES, PIP_TIMEOUT_S)
    if installed.returncode != 0:
        text = installed.stdout + installed.stderr
        if re.search(r"(Could not fetch|Failed to establish|Temporary failure|Network is unreachable|"
                     r"timed out|from versions: none|ProxyError|Max retries)", text):
            shutil.rmtree(venv, ignore_errors=True)
            raise Skip("PyPI is not reachable from this machine (pip install %s): %s"
                       % (" ".join(PACKAGES), text.strip().splitlines()[-1]))
        raise RuntimeError("pip install failed:\n" + text)
    with open(marker, "w") as f:
        f.write(wanted)
    print("venv %s: installed %s in %.0f s" % (venv, " ".join(PACKAGES), time.monotonic() - start))


def write_repository(root, fixtures):
    import json
    for name, fixture, settings in (
            ("llama", "Llama-3.1-8B-Instruct.json", {"operation": "rotate", "max_len": 8192}),
            ("llama-attention", "Llama-3.1-8B-Instruct.json",
             {"operation": "attention", "max_len": 8192}),
            ("deepseek-v3", "DeepSeek-V3.json", {"operation": "rotate"})):
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        shutil.copy(os.path.join(fixtures, fixture), os.path.join(folder, "config.json"))
        with open(os.path.join(folder, "ropeserve.json"), "w") as f:
            json.dump(settings, f)


def check(result, what):
    if result.returncode != 0:
        raise RuntimeError("%s exited %d\nstdout:\n%s\nstderr:\n%s"
                           % (what, result.returncode, result.stdout, result.stderr))
    print(result.stdout.strip())


def perf_analyzer(venv, address, extra, what, refused_with=None):
    """Runs perf_analyzer; with `refused_with`, it must fail with that text."""
    binary = os.path.join(venv, "bin", "perf_analyzer")
    if not os.access(binary, os.X_OK):
        raise RuntimeError("%s not found: tritonclient's wheel ships it" % binary)
    env = dict(os.environ)
    site = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                           "import nvidia.cuda_runtime, os; "
                           "print(os.path.join(list(nvidia.cuda_runtime.__path__)[0], 'lib'))"],
                          capture_output=True, text=True, timeout=60)
    env["LD_LIBRARY_PATH"] = site.stdout.strip() + ":" + env.get("LD_LIBRARY_PATH", "")
    cmd = [binary, "-m", "llama", "-u", address, "-i", "grpc",
           "--shape", "q:1,1,32,128", "--shape", "k:1,1,8,128", "--shape", "positions:1",
           "--input-data", "zero", "--concurrency-range", "2",
           "--measurement-interval", "500", "--max-trials", "3",
           "--stability-percentage", "999"] + extra
    result = run(cmd, PERF_TIMEOUT_S, env)
    if refused_with is not None:
        if result.returncode == 0 or refused_with not in result.stderr:
            raise RuntimeError("perf_analyzer (%s) should be refused with %r: exited %d\n"
                               "stdout:\n%s\nstderr:\n%s" % (what, refused_with, result.returncode,
                                                            result.stdout, result.stderr))
        print("perf_analyzer %s: refused as expected (%s)" % (what, refused_with))
        return
    if result.returncode != 0 or "Throughput" not in result.stdout:
        raise RuntimeError("perf_analyzer (%s) exited %d\nstdout:\n%s\nstderr:\n%s"
                           % (what, result.returncode, result.stdout, result.stderr))
    line = [l for l in result.stdout.splitlines() if "Throughput" in l]
    print("perf_analyzer %s: %s" % (what, line[-1].strip()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--venv", required=True)
    parser.add_argument("--stubs", required=True)
    parser.add_argument("--example", required=True)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    try:
        ensure_venv(args.venv)
    except Skip as skip:
        print("SKIP: %s" % skip)
        return 77
    python = os.path.join(args.venv, "bin", "python")
    repository = os.path.join(args.workdir, "models")
    write_repository(repository, args.fixtures)

    check(run([python, os.path.join(HERE, "wire_compat_check.py"), "--stubs", args.stubs],
              CHECK_TIMEOUT_S), "wire_compat_check.py")
    server_args = ["--backend=cpu", "--cpu_threads=1", "--work_threads=2",
                   "--shutdown_grace_period=2s", "--model_repository=" + repository]
    with RopeServe(args.ropeserve, server_args, metrics=True) as server:
        check(run([python, os.path.join(HERE, "tritonclient_checks.py"), "--target",
                   server.address, "--llama_config",
                   os.path.join(args.fixtures, "Llama-3.1-8B-Instruct.json"),
                   "--deepseek_config", os.path.join(args.fixtures, "DeepSeek-V3.json")],
                  CHECK_TIMEOUT_S),
              "tritonclient_checks.py")
        check(run([python, args.example, "--target", server.address], CHECK_TIMEOUT_S),
              "rotate_with_triton_stubs.py")
        if subprocess.run(["sh", "-c", "ldconfig -p | grep -q 'libb64.so.0d'"]).returncode != 0:
            raise RuntimeError("perf_analyzer needs libb64.so.0d: apt-get install libb64-0d "
                               "(scripts/setup.sh)")
        perf_analyzer(args.venv, server.address, [], "ModelInfer, bytes")
        # perf_analyzer sizes its output regions with ftruncate and never
        # writes them: ropeserve refuses such sparse objects at registration
        # (docs/operations.md, "Shared memory"), so this mode cannot run.
        perf_analyzer(args.venv, server.address,
                      ["--shared-memory", "system", "--output-shared-memory-size", "65536"],
                      "ModelInfer, system shared memory",
                      refused_with="a sparse object")
        perf_analyzer(args.venv, server.address, ["--streaming"], "ModelStreamInfer")
        counts = server.request_counts()
        for rpc in ("ModelInfer", "ModelStreamInfer", "SystemSharedMemoryRegister"):
            if counts.get((rpc, "OK"), 0) == 0:
                raise RuntimeError("rope_requests_total has no OK %s: %s" % (rpc, counts))
        bad = {k: v for k, v in counts.items()
               if k[1] not in ("OK", "NOT_FOUND", "INVALID_ARGUMENT")
               and k != ("SystemSharedMemoryRegister", "FAILED_PRECONDITION")}
        if bad:
            raise RuntimeError("unexpected refusals: %s" % bad)
    print("PASS: tritonclient, Triton's published stubs and perf_analyzer against ropeserve")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print("FAIL: %s" % error)
        sys.exit(1)
