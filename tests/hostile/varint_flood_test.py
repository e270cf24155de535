#!/usr/bin/python3
"""Packed varints cannot blow the server's memory past its bound.

A packed repeated int64 costs one byte per small element on the wire and
eight once parsed (sixteen while the field grows). Sixteen concurrent
Rotates whose `positions` are 8 Mi zeros (8 MiB on the wire each, inside
--max_message_bytes) would parse to 1-2 GiB together if the server parsed
them before counting them. The server charges what a request's parse will
allocate to --max_inflight_bytes before parsing it: each is refused
unparsed (RESOURCE_EXHAUSTED naming the budget), unless the transport's
half of the budget reset it while it arrived (RESOURCE_EXHAUSTED,
"RST_STREAM with error code 11", or UNAVAILABLE after a GOAWAY); none is
parsed (no OK, no INVALID_ARGUMENT), and ropeserve's RSS stays within its
start + --max_inflight_bytes + --table_cache_bytes + a margin, the
documented bound (sampled every 10 ms; the server is killed past that
limit and the test fails). Afterwards it still answers and holds no byte.
Two rounds, bounded in time.
Needs the ropeserve Python package (its generated rope_pb2); gRPC from
Debian's python3-grpcio.

Usage: varint_flood_test.py --ropeserve PATH
"""

import concurrent.futures
import os
import threading
import unittest

import grpc

from h2_attacks import rss_bytes
from polling import settled_server_info
from ropeserve_process import RopeServe
from server_test_main import parse_ropeserve_args, run_tests_needing

ARGS = None
MIB = 1 << 20
CALLS = 16
ROUNDS = 2
VARINTS = 8 * MIB  # zeros: one byte each on the wire
MAX_INFLIGHT_BYTES = 64 * MIB
TABLE_CACHE_BYTES = 16 * MIB
MARGIN = 128 * MIB
DEADLINE_S = 60


def stubs():
    from ropeserve.proto import rope_pb2, rope_pb2_grpc
    return rope_pb2, rope_pb2_grpc


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def flood_request(rope_pb2):
    """A small valid Rotate followed by field 5 (positions), packed: VARINTS
    zeros."""
    rotate = rope_pb2.RotateRequest()
    rotate.config.head_dim = 8
    rotate.config.max_len = 64
    rotate.q.dtype = rope_pb2.FLOAT32
    rotate.q.shape.extend([1, 2, 1, 8])
    rotate.q.data = bytes(4 * 16)
    return rotate.SerializeToString() + b"\x2a" + varint(VARINTS) + bytes(VARINTS)


class VarintFlood(unittest.TestCase):

    def test_concurrent_varint_heavy_rotates_stay_within_the_bound(self):
        rope_pb2, rope_pb2_grpc = stubs()
        wire = flood_request(rope_pb2)
        # Under AddressSanitizer freed memory waits in a quarantine (256 MiB
        # by default) before it is reused, which RSS would count as the
        # server's: off for this server (ignored by a build without ASan).
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = ":".join(
            filter(None, [env.get("ASAN_OPTIONS", ""),
                          "quarantine_size_mb=0", "thread_local_quarantine_size_kb=0"]))
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                        "--max_inflight_bytes=%d" % MAX_INFLIGHT_BYTES,
                                        "--table_cache_bytes=%d" % TABLE_CACHE_BYTES,
                                        "--shutdown_grace_period=1s"], env=env) as server:
            pid = server.proc.pid
            options = [("grpc.max_send_message_length", 2 * len(wire))]
            with grpc.insecure_channel(server.address, options=options) as channel:
                stub = rope_pb2_grpc.RopeServiceStub(channel)
                info = stub.GetServerInfo(rope_pb2.GetServerInfoRequest(), timeout=DEADLINE_S)
                rss_before = rss_bytes(pid)
                limit = rss_before + MAX_INFLIGHT_BYTES + TABLE_CACHE_BYTES + MARGIN
                raw_rotate = channel.unary_unary("/rope.v1.RopeService/Rotate",
                                                 request_serializer=None,
                                                 response_deserializer=None)
                peak = [rss_before]
                killed = [False]
                done = threading.Event()

                def sample():
                    while not done.wait(0.01):
                        rss = rss_bytes(pid)
                        peak[0] = max(peak[0], rss)
                        if rss > limit and not killed[0]:
                            killed[0] = True
                            server.kill()

                def call(_):
                    try:
                        raw_rotate(wire, timeout=DEADLINE_S)
                        return grpc.StatusCode.OK, ""
                    except grpc.RpcError as e:
                        return e.code(), e.details() or ""

                sampler = threading.Thread(target=sample, daemon=True)
                sampler.start()
                results = []
                try:
                    with concurrent.futures.ThreadPoolExecutor(CALLS) as pool:
                        for _ in range(ROUNDS):
                            results += list(pool.map(call, range(CALLS)))
                finally:
                    done.set()
                    sampler.join()
                self.assertFalse(killed[0], "ropeserve's RSS passed %d MiB (start %d MiB)"
                                 % (limit // MIB, rss_before // MIB))
                print("RSS: start %.1f MiB, peak %.1f MiB, limit %.1f MiB"
                      % (rss_before / MIB, peak[0] / MIB, limit / MIB))
                self.assertEqual(len(results), CALLS * ROUNDS)
                refused_unparsed = 0
                for code, details in results:
                    if "max_inflight_bytes" in details:
                        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, details)
                        self.assertIn("more than the server's whole", details)
                        refused_unparsed += 1
                    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        self.assertIn("RST_STREAM with error code 11", details)
                    else:
                        # The transport's half freeing its quota: GOAWAY
                        # (docs/operations.md, "the transport's half").
                        self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)
                print("refused before their parse: %d, reset while arriving: %d"
                      % (refused_unparsed, len(results) - refused_unparsed))
                self.assertGreater(refused_unparsed, 0)
                # Still up, answering, holding nothing (once every call's
                # OnDone has run: polling.py).
                self.assertIsNone(server.proc.poll())
                info = settled_server_info(stub, rope_pb2, DEADLINE_S)
                self.assertEqual(info.inflight_bytes.bytes, 0)
                # At least those (a refusal may also reach a client whose
                # connection the transport's half reset meanwhile).
                self.assertGreaterEqual(info.inflight_bytes.refusals, refused_unparsed)


def main():
    global ARGS
    ARGS, rest = parse_ropeserve_args(__doc__)
    run_tests_needing(stubs, rest)


if __name__ == "__main__":
    main()
