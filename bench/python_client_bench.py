#!/usr/bin/python3
"""The Python client (ropeserve package) vs ropeload, per call, and where the Python time goes.

Starts one ropeserve (CPU backend, --enable_echo) on 127.0.0.1 and runs
scenarios; each round of a scenario runs, one after the other, the same
number of calls (one in flight, one connection) with:
  ropeload  the C++ client (its mean latency and its own marshal time);
  python    the ropeserve package on torch bfloat16 tensors, timed end to end,
            and again phase by phase: packing (arguments -> request bytes),
            call (gRPC send, server work, gRPC receive), unpacking (reply
            bytes -> torch tensors);
  stubs     the plain generated stubs (protobuf messages, tobytes() in,
            .data out): what the package replaces;
  echo      the request's bytes through the server's EchoService from Python
            (same size each way, no RoPE work, no packing): gRPC Python's floor.
Scenarios: decode (Rotate q [1,1,32,128], k [1,1,8,128]), prefill (Rotate
q [1,2048,32,128], k [1,2048,8,128]), both bfloat16 with Llama-3-8B heads
as bench/load/run_scenarios.sh; and table (GetTable of a whole 40960-row
table, a 20 MiB reply to a tiny request: the receive path alone).

Short rounds, alternated, many of them: the machine is shared, and load
from other jobs drifts over seconds. Each column is the median over rounds
of the round's mean; the overhead is the median over rounds of the round's
ratio. Results: OUT.md and OUT.json.

Usage: bench/python_client_bench.py [--build-dir build] [--rounds 12] [--out bench/results/python_client]
       [--glibc-malloc-defaults]   (the client process without ropeserve.tune_malloc())
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE_ROWS = 40960
# name, q shape, k shape, start_pos, calls per client per round
ROTATE_SCENARIOS = [
    ("decode", (1, 1, 32, 128), (1, 1, 8, 128), 4000, 300),
    ("prefill", (1, 2048, 32, 128), (1, 2048, 8, 128), 0, 6),
]
TABLE_CALLS = 6


def timed(calls, warmup, call):
    """call()'s return values over `calls` calls, after `warmup` unmeasured ones."""
    for _ in range(warmup):
        call()
    return [call() for _ in range(calls)]


def ms(seconds):
    return 1e3 * statistics.fmean(seconds)


ROPELOAD_FAILURES = []  # (command, exit status, stderr tail) of runs that had to be repeated


def run_ropeload(build_dir, target, flags, calls):
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        cmd = [os.path.join(build_dir, "bin", "ropeload"), "--target=" + target, "--noprogress",
               "-c", "1", "--connections=1", "--warmup=0.3s", "-n", str(calls), "--json=" + report.name] + flags
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if result.returncode != 0:  # recorded in the report, then tried once more
            ROPELOAD_FAILURES.append({"command": " ".join(cmd), "status": result.returncode,
                                      "stderr": result.stderr[-2000:]})
            print("ropeload exited %d: %s" % (result.returncode, result.stderr[-500:]), flush=True)
            subprocess.run(cmd, check=True, capture_output=True, timeout=300)
        with open(report.name) as f:
            step = json.load(f)["steps"][0]
    if step["errors"]:
        raise RuntimeError("ropeload: %s" % step["errors_by_code"])
    return {"mean_ms": step["latency_ms"]["mean"], "marshal_ms": step["marshal_ms"]["mean"]}


def rotate_flags(q_shape, k_shape, start_pos):
    return ["--random_q_shape=" + ",".join(map(str, q_shape)), "--random_k_shape=" + ",".join(map(str, k_shape)),
            "--dtype=bfloat16", "--theta=500000", "--max_len=8192", "--start_pos=%d" % start_pos]


def phased(pack, method, calls, warmup):
    """Timings of pack() -> (request, decode), method(request), decode(reply): mean ms of each,
    and the share of calls whose first result was a view of the reply buffer."""
    views = []

    def call():
        t0 = time.perf_counter()
        request, decode = pack()
        t1 = time.perf_counter()
        reply = method(request, timeout=120)
        t2 = time.perf_counter()
        result = decode(reply)
        t3 = time.perf_counter()
        first = result[0]
        if isinstance(first, torch.Tensor):
            base = np.frombuffer(reply, np.uint8).ctypes.data
            views.append(base <= first.data_ptr() < base + len(reply))
        return t1 - t0, t2 - t1, t3 - t2

    samples = timed(calls, warmup, call)
    out = {"pack_ms": ms(s[0] for s in samples), "call_ms": ms(s[1] for s in samples),
           "unpack_ms": ms(s[2] for s in samples)}
    if views:
        out["view_share"] = sum(views) / len(views)
    return out


def end_to_end(function, calls, warmup):
    def call():
        t0 = time.perf_counter()
        function()
        return time.perf_counter() - t0
    return ms(timed(calls, warmup, call))


def stub_round(client, q, k, config, start_pos, calls, warmup):
    from ropeserve.proto import rope_pb2 as pb, rope_pb2_grpc
    stub = rope_pb2_grpc.RopeServiceStub(client.channel)
    config_message = config.to_proto()

    def tensor(x):
        return pb.Tensor(dtype=pb.BFLOAT16, shape=list(x.shape), data=x.view(torch.int16).numpy().tobytes())

    def call():
        t0 = time.perf_counter()
        request = pb.RotateRequest(config=config_message, q=tensor(q), k=tensor(k), start_pos=start_pos)
        t1 = time.perf_counter()
        reply = stub.Rotate(request, timeout=120)
        t2 = time.perf_counter()
        for t in (reply.q, reply.k):
            torch.frombuffer(bytearray(t.data), dtype=torch.bfloat16).view(tuple(t.shape))
        t3 = time.perf_counter()
        return t3 - t0, t1 - t0, t2 - t1, t3 - t2

    samples = timed(calls, warmup, call)
    return {"mean_ms": ms(s[0] for s in samples), "pack_ms": ms(s[1] for s in samples),
            "call_ms": ms(s[2] for s in samples), "unpack_ms": ms(s[3] for s in samples)}


def echo_round(client, nbytes, calls, warmup):
    from ropeserve import _wire
    from ropeserve.proto import rope_pb2 as pb
    echo = client.channel.unary_unary("/rope.bench.v1.EchoService/Echo")
    # EchoRequest has Tensor's field numbers (dtype 1, shape 2, data 3).
    payload = _wire.join(pb.Tensor(dtype=pb.BFLOAT16, shape=[nbytes // 2]).SerializeToString(),
                         [b"\x1a" + _wire.varint(nbytes), bytes(nbytes)])
    return {"mean_ms": end_to_end(lambda: echo(payload, timeout=120), calls, warmup)}


def memcpy_ms(nbytes):
    data = bytes(nbytes)

    def copy():
        t0 = time.perf_counter()
        bytearray(data)
        return time.perf_counter() - t0
    return 1e3 * statistics.median(timed(20, 2, copy))


def grpcio_receive_loop_ms(nbytes, slice_bytes=16 << 10):
    """grpcio 1.51's ReceiveMessageOperation loop (Cython) restated in Python: a bytes object
    per slice, appended to a bytearray, then bytes() of it. The copies dominate; the
    interpreter adds ~1 us per slice."""
    view = memoryview(bytes(nbytes))

    def receive():
        t0 = time.perf_counter()
        message = bytearray()
        for start in range(0, nbytes, slice_bytes):
            message += bytes(view[start:start + slice_bytes])
        bytes(message)
        return time.perf_counter() - t0
    return 1e3 * statistics.median(timed(7, 1, receive))


def summarize(rounds, nbytes, clients):
    summary = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
               for name, runs in rounds.items()}
    for name in clients:
        ratios = [p["mean_ms"] / r["mean_ms"] - 1 for p, r in zip(rounds[name], rounds["ropeload"])]
        summary[name]["overhead"] = statistics.median(ratios)
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        summary[name]["overhead_quartiles"] = [quartiles[0], quartiles[2]]
    summary["bytes"] = nbytes
    summary["memcpy_ms"] = memcpy_ms(nbytes)
    summary["grpcio_receive_loop_ms"] = grpcio_receive_loop_ms(nbytes)
    summary["rounds"] = rounds
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results", "python_client"))
    parser.add_argument("--glibc-malloc-defaults", action="store_true",
                        help="keep glibc malloc's defaults in this (the Python client's) process: "
                             "ROPESERVE_TUNE_MALLOC=0, so the Client does not call tune_malloc()")
    args = parser.parse_args()
    sys.path[:0] = [os.path.join(args.build_dir, "client", "python"),
                    os.path.join(REPO, "tests", "support", "python")]
    import grpc
    import google.protobuf
    import ropeserve
    from ropeserve import _calls
    from ropeserve_process import RopeServe
    if args.glibc_malloc_defaults:
        os.environ["ROPESERVE_TUNE_MALLOC"] = "0"

    config = ropeserve.RopeConfig(head_dim=128, max_len=8192, theta=500000.0)
    table_config = ropeserve.RopeConfig(head_dim=128, max_len=TABLE_ROWS, theta=500000.0)
    results = {}
    load_before = os.getloadavg()
    binary = os.path.join(args.build_dir, "bin", "ropeserve")
    with RopeServe(binary, ["--backend=cpu", "--enable_echo"]) as server, \
            ropeserve.Client(server.address, deadline=120.0) as client:
        info = client.info()
        methods = client._methods  # pylint: disable=protected-access
        for name, q_shape, k_shape, start_pos, calls in ROTATE_SCENARIOS:
            torch.manual_seed(0)
            q = torch.randn(q_shape).to(torch.bfloat16)
            k = torch.randn(k_shape).to(torch.bfloat16)
            request_bytes = len(_calls.rotate(q, k, config=config, start_pos=start_pos)[0])
            warmup = max(2, calls // 10)
            rounds = {"ropeload": [], "python": [], "stubs": [], "echo": []}
            for r in range(args.rounds):
                rounds["ropeload"].append(run_ropeload(args.build_dir, server.address,
                                                       rotate_flags(q_shape, k_shape, start_pos), calls))
                python = {"mean_ms": end_to_end(lambda: client.rotate(q, k, config=config, start_pos=start_pos),
                                                calls, warmup)}
                python.update(phased(lambda: _calls.rotate(q, k, config=config, start_pos=start_pos),
                                     methods["Rotate"], calls, 1))
                rounds["python"].append(python)
                rounds["stubs"].append(stub_round(client, q, k, config, start_pos, calls, warmup))
                rounds["echo"].append(echo_round(client, request_bytes, calls, warmup))
                print("%s round %d: ropeload %.3f ms, python %.3f ms, stubs %.3f ms, echo %.3f ms" % (
                    name, r + 1, rounds["ropeload"][-1]["mean_ms"], python["mean_ms"],
                    rounds["stubs"][-1]["mean_ms"], rounds["echo"][-1]["mean_ms"]), flush=True)
            results[name] = summarize(rounds, request_bytes, ("python", "stubs", "echo"))

        rounds = {"ropeload": [], "python": []}
        for r in range(args.rounds):
            rounds["ropeload"].append(run_ropeload(args.build_dir, server.address, [
                "--workload=table", "--head_dim=128", "--theta=500000", "--max_len=%d" % TABLE_ROWS,
                "--table_count=0"], TABLE_CALLS))
            python = {"mean_ms": end_to_end(lambda: client.table(table_config), TABLE_CALLS, 2)}
            python.update(phased(lambda: _calls.table(table_config), methods["GetTable"], TABLE_CALLS, 1))
            rounds["python"].append(python)
            print("table round %d: ropeload %.3f ms, python %.3f ms" % (
                r + 1, rounds["ropeload"][-1]["mean_ms"], python["mean_ms"]), flush=True)
        results["table"] = summarize(rounds, 2 * TABLE_ROWS * 64 * 4, ("python",))

    report = {"schema": "ropeserve-python-client-bench/1",
              "server": "ropeserve %s, backend %s (%s)" % (info.version, info.backend, info.device),
              "machine": "%s, %d CPUs, shared with other jobs" % (platform.machine(), os.cpu_count()),
              "python": sys.version.split()[0], "grpcio": grpc.__version__,
              "protobuf": google.protobuf.__version__, "torch": torch.__version__,
              "load_average": [load_before, os.getloadavg()], "rounds": args.rounds,
              "tune_malloc": not args.glibc_malloc_defaults,
              "ropeload_failures": ROPELOAD_FAILURES, "scenarios": results}
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(report))
    print("wrote %s.md and %s.json" % (args.out, args.out))


def markdown(report):
    scenarios = report["scenarios"]
    rotate = [(n, s) for n, s in scenarios.items() if n != "table"]
    lines = [
        "# Python client vs ropeload, per call",
        "",
        "Written by `bench/python_client_bench.py`: %d alternating rounds per scenario; each figure is "
        "the median over rounds of the round's mean, each overhead the median of the rounds' ratios. "
        "Server: %s. Machine: %s; Python %s, grpcio %s, protobuf %s, torch %s. **The machine is "
        "shared with other jobs (1-minute load average %.1f at the start, %.1f at the end, on %d "
        "CPUs): compare the columns of one run, not absolute times across runs; the quartiles "
        "show how much the ratio moved from round to round.**" % (
            report["rounds"], report["server"], report["machine"], report["python"], report["grpcio"],
            report["protobuf"], report["torch"], report["load_average"][0][0], report["load_average"][1][0],
            os.cpu_count()),
        "",
        "The Python client's process: %s." % (
            "the package's default, **`ropeserve.tune_malloc()` applied by the Client** (glibc "
            "keeps freed buffers for reuse: mmap threshold 32 MiB, trim threshold 256 MiB)"
            if report.get("tune_malloc") else
            "**glibc malloc's defaults** (`--glibc-malloc-defaults`: ROPESERVE_TUNE_MALLOC=0)"),
        "",
        "Rotate, bfloat16, q [1,S,32,128] and k [1,S,8,128], theta 500000; every client with one "
        "call in flight on one connection, against the same server.",
        "",
        "| scenario | request | ropeload ms | Python client ms | overhead vs ropeload (quartiles) | "
        "plain stubs ms (overhead) | echo of the same bytes from Python ms (overhead) | memcpy of the "
        "request ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in rotate:
        lines.append("| %s | %.2f MiB | %.3f | %.3f | **%+.0f%%** (%+.0f%% .. %+.0f%%) | %.3f (%+.0f%%) | "
                     "%.3f (%+.0f%%) | %.3f |" % (
                         name, s["bytes"] / 2 ** 20, s["ropeload"]["mean_ms"], s["python"]["mean_ms"],
                         100 * s["python"]["overhead"], 100 * s["python"]["overhead_quartiles"][0],
                         100 * s["python"]["overhead_quartiles"][1], s["stubs"]["mean_ms"],
                         100 * s["stubs"]["overhead"], s["echo"]["mean_ms"], 100 * s["echo"]["overhead"],
                         s["memcpy_ms"]))
    lines += [
        "",
        "Where the time goes (the Python phases timed in calls of their own):",
        "",
        "| scenario | Python: packing ms | call (send, server, receive) ms | unpacking ms | q result a "
        "view of the reply | grpcio's receive loop on this size, restated (see below) ms | "
        "ropeload's own marshal ms | plain stubs: packing / call / unpacking ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in rotate:
        p, st = s["python"], s["stubs"]
        lines.append("| %s | %.3f | %.3f | %.3f | %s | %.3f | %.3f | %.3f / %.3f / %.3f |" % (
            name, p["pack_ms"], p["call_ms"], p["unpack_ms"],
            "%.0f%% of calls" % (100 * p["view_share"]) if "view_share" in p else "n/a",
            s["grpcio_receive_loop_ms"], s["ropeload"]["marshal_ms"], st["pack_ms"], st["call_ms"],
            st["unpack_ms"]))
    table = scenarios.get("table")
    if table:
        p = table["python"]
        lines += [
            "",
            "The receive path alone: GetTable of a whole %d-row table (head_dim 128), a %.0f MiB reply "
            "to a request of a few bytes." % (TABLE_ROWS, table["bytes"] / 2 ** 20),
            "",
            "| | ropeload ms | Python client ms | overhead (quartiles) | Python: packing / call / "
            "unpacking ms | memcpy of the reply ms | grpcio's receive loop on the reply, restated in "
            "Python ms |",
            "|---|---|---|---|---|---|---|",
            "| GetTable | %.3f | %.3f | **%+.0f%%** (%+.0f%% .. %+.0f%%) | %.3f / %.3f / %.3f | %.3f | %.3f |" % (
                table["ropeload"]["mean_ms"], p["mean_ms"], 100 * p["overhead"],
                100 * p["overhead_quartiles"][0], 100 * p["overhead_quartiles"][1], p["pack_ms"],
                p["call_ms"], p["unpack_ms"], table["memcpy_ms"], table["grpcio_receive_loop_ms"]),
            "",
            "The last column runs, in this process, the loop grpcio 1.51 uses to hand a received "
            "message to Python (`ReceiveMessageOperation.un_c`: a bytes object per 16 KiB slice, "
            "appended to a bytearray, then `bytes()` of it), restated in Python: its copies and the "
            "bytearray's reallocations cost several memcpys of the message, which the C++ client "
            "does not pay.",
        ]
    prefill = scenarios.get("prefill")
    if prefill:
        overhead = prefill["python"]["overhead"]
        low, high = prefill["python"]["overhead_quartiles"]
        lines += ["", "**Target: the Python client adds at most 20%% to ropeload's per-call "
                      "latency for prefill-size tensors. Measured: %+.0f%% (median of %d rounds; quartiles "
                      "%+.0f%% .. %+.0f%%): %s.** gRPC Python alone, echoing the same bytes with no RoPE "
                      "work and no packing, measures %+.0f%% against ropeload's whole Rotate." % (
                          100 * overhead, report["rounds"], 100 * low, 100 * high,
                          "met in the median" if overhead <= 0.20 else "NOT met",
                          100 * prefill["echo"]["overhead"])]
    for failure in report["ropeload_failures"]:
        lines += ["", "ropeload exited with status %d once and was run again: `%s`; its stderr ended with "
                      "`%s`." % (failure["status"], failure["command"], failure["stderr"].strip()[-300:])]
    lines += [
        "",
        "Reading the columns: *packing* builds the request bytes (protobuf for the small fields, one "
        "join of the tensor bytes); *unpacking* splits the reply and views the tensor bytes in place "
        "(replies of 64 KiB or more; a copy only when the bytes sit at an address not aligned for "
        "the element type; smaller replies go through protobuf). The *call* is gRPC Python's send "
        "(one more copy of the request, into a gRPC slice), the HTTP/2 transfer both ways, the "
        "server's work, and gRPC Python's receive, which in grpcio 1.51 turns the reply's slices "
        "into one `bytes` through a bytearray: a bytes object per slice, the bytearray's growth, "
        "then a final `bytes()` copy (grpc/grpc#42287; an opt-in zero-copy receive is proposed in "
        "grpc/grpc#42193). ropeload's C++ client parses the reply out of the slices with one copy. "
        "*plain stubs* build protobuf messages from `tobytes()` and read `.data`, copying each "
        "tensor several more times.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
