#!/usr/bin/python3
"""hf_config_json cannot stall the server: parsing is linear in the text.

Two 4 MiB config.json texts of empty objects (`[{},{},...]`, 1.4 million
of them, inside the size limit) go to a server with two work threads, then
a small well-behaved Rotate. nlohmann's callback parser walked the array
after every '}' (quadratic: minutes per call), so the two large calls held
both work threads and the small one waited behind them. Now every call is
answered within the test's deadline (generous: 60 s for all three under a
loaded CI machine; the parse itself takes well under a second), the large
ones refused for what the JSON lacks, the small one OK. Also: 65 nesting
levels are refused and 64 are not. Needs the ropeserve Python package
(its generated rope_pb2); gRPC from Debian's python3-grpcio.

Usage: json_stall_test.py --ropeserve PATH
"""

import concurrent.futures
import time
import unittest

import grpc

from ropeserve_process import RopeServe
from server_test_main import parse_ropeserve_args, run_tests_needing

ARGS = None
DEADLINE_S = 60


def stubs():
    from ropeserve.proto import rope_pb2, rope_pb2_grpc
    return rope_pb2, rope_pb2_grpc


def rotate_request(rope_pb2, json_text=None):
    request = rope_pb2.RotateRequest()
    request.config.max_len = 64
    if json_text is None:
        request.config.head_dim = 8
    else:
        request.config.hf_config_json = json_text
    request.q.dtype = rope_pb2.FLOAT32
    request.q.shape.extend([1, 2, 1, 8])
    request.q.data = bytes(4 * 16)
    return request


def empty_objects(total_bytes):
    text = '{"head_dim": 8, "x": ['
    count = (total_bytes - len(text) - 8) // 3
    return text + "{}," * count + "{}]}"


def nested(levels):
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


class JsonCannotStall(unittest.TestCase):
    def test_large_configs_do_not_hold_the_work_threads(self):
        rope_pb2, rope_pb2_grpc = stubs()
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1", "--work_threads=2",
                                        "--inline_rotate_max_bytes=0",
                                        "--shutdown_grace_period=1s"]) as server:
            channel = grpc.insecure_channel(server.address, options=[
                ("grpc.max_send_message_length", 8 << 20)])
            stub = rope_pb2_grpc.RopeServiceStub(channel)
            large = rotate_request(rope_pb2, empty_objects((4 << 20) - 1024))
            started = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
                heavy = [pool.submit(stub.Rotate, large, timeout=DEADLINE_S) for _ in range(2)]
                time.sleep(0.2)  # both on the work threads first
                small = pool.submit(stub.Rotate, rotate_request(rope_pb2), timeout=DEADLINE_S)
                self.assertEqual(len(small.result().q.data), 64)
                for call in heavy:
                    with self.assertRaises(grpc.RpcError) as refused:
                        call.result()
                    self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                                     refused.exception.details())
                    self.assertIn("hf_config_json", refused.exception.details())
            self.assertLess(time.monotonic() - started, DEADLINE_S)
            channel.close()

    def test_parsing_stops_at_the_callers_deadline(self):
        # A 4 MiB text (the engine's limit) takes ~250 ms to parse on a
        # 2-core CI machine, so a 250 ms deadline could not tell a stopped
        # parse from a finished one; with a 100 ms deadline (time enough for
        # the message to arrive over loopback) the server must
        # stop parsing (the call ends CANCELLED or DEADLINE_EXCEEDED on its
        # side, or never reaches the service), not parse to the end and
        # answer INVALID_ARGUMENT to a caller long gone.
        rope_pb2, rope_pb2_grpc = stubs()
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1", "--work_threads=1",
                                        "--inline_rotate_max_bytes=0",
                                        "--shutdown_grace_period=1s"], metrics=True) as server:
            channel = grpc.insecure_channel(server.address, options=[
                ("grpc.max_send_message_length", 8 << 20)])
            stub = rope_pb2_grpc.RopeServiceStub(channel)
            large = rotate_request(rope_pb2, empty_objects((4 << 20) - 1024))
            with self.assertRaises(grpc.RpcError) as late:
                stub.Rotate(large, timeout=0.1)
            self.assertEqual(late.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
            # The server counts the call once it has finished with it: at
            # once when the parse stops at the deadline; after the whole
            # parse (INVALID_ARGUMENT) when it does not.
            counts = {}
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not counts:
                time.sleep(0.1)
                counts = {code: n for (rpc, code), n in server.request_counts().items()
                          if rpc == "Rotate"}
            # On a loaded machine the message may arrive after the deadline
            # and gRPC drop the call before the service sees it (no count).
            self.assertLessEqual(sum(counts.values()), 1, counts)
            self.assertEqual(counts.get("INVALID_ARGUMENT", 0), 0,
                             "the parse ran to its end after the deadline: %s" % counts)
            channel.close()

    def test_depth_limit_is_exact(self):
        rope_pb2, rope_pb2_grpc = stubs()
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                        "--shutdown_grace_period=1s"]) as server:
            with grpc.insecure_channel(server.address) as channel:
                stub = rope_pb2_grpc.RopeServiceStub(channel)
                for levels, deep in ((64, False), (65, True)):
                    with self.assertRaises(grpc.RpcError) as refused:
                        stub.Rotate(rotate_request(rope_pb2, nested(levels)), timeout=20)
                    self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                    self.assertEqual("deeper than 64 levels" in refused.exception.details(), deep,
                                     "%d levels: %s" % (levels, refused.exception.details()))


def main():
    global ARGS
    ARGS, rest = parse_ropeserve_args(__doc__)
    run_tests_needing(stubs, rest)


if __name__ == "__main__":
    main()
