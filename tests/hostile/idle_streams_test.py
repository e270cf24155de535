#!/usr/bin/python3
"""RotateStreams that never send cannot take the server's call slots.

One client opens more RotateStreams than --max_concurrent_calls and sends
nothing on them. A stream holds a call slot only while a message of it is
being served, so the client's own unary calls, and another client's, are
served meanwhile; each idle stream is served once it sends. (A stream used
to hold a slot for its whole life: 64 idle streams refused everyone else's
calls while health said SERVING, until the connection aged out.) Needs the
ropeserve Python package (its generated rope_pb2); gRPC from Debian's
python3-grpcio.

Usage: idle_streams_test.py --ropeserve PATH
"""

import queue
import unittest

import grpc

from ropeserve_process import RopeServe
from server_test_main import parse_ropeserve_args, run_tests_needing

ARGS = None
SLOTS = 4
IDLE_STREAMS = 3 * SLOTS
# Every stream's deadline, and each idle stream's wait for its message: the
# whole test runs within it, however slow the machine (ASan on busy cores).
TIMEOUT_S = 60


def stubs():
    from ropeserve.proto import rope_pb2, rope_pb2_grpc
    return rope_pb2, rope_pb2_grpc


def rotate_request(rope_pb2):
    request = rope_pb2.RotateRequest()
    request.config.head_dim = 8
    request.config.max_len = 64
    request.q.dtype = rope_pb2.FLOAT32
    request.q.shape.extend([1, 2, 1, 8])
    request.q.data = bytes(4 * 16)
    return request


class IdleStreams(unittest.TestCase):

    def test_idle_streams_leave_the_slots_to_other_calls(self):
        rope_pb2, rope_pb2_grpc = stubs()
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                        "--max_concurrent_calls=%d" % SLOTS,
                                        "--shutdown_grace_period=1s"]) as server:
            idle_channel = grpc.insecure_channel(server.address)
            idle_stub = rope_pb2_grpc.RopeServiceStub(idle_channel)
            outboxes = [queue.Queue() for _ in range(IDLE_STREAMS)]

            def messages(outbox):
                while True:
                    item = outbox.get(timeout=TIMEOUT_S)
                    if item is None:
                        return
                    yield item

            streams = [idle_stub.RotateStream(messages(box), timeout=TIMEOUT_S)
                       for box in outboxes]
            # The same client and another one, each on its own connection.
            for _ in range(2):
                other = grpc.insecure_channel(server.address)
                stub = rope_pb2_grpc.RopeServiceStub(other)
                for _ in range(2 * SLOTS):
                    reply = stub.Rotate(rotate_request(rope_pb2), timeout=TIMEOUT_S)
                    self.assertEqual(len(reply.q.data), 4 * 16)
                other.close()
            # Every idle stream is served when it sends.
            for box, stream in zip(outboxes, streams):
                box.put(rotate_request(rope_pb2))
                reply = next(stream)
                self.assertEqual(len(reply.q.data), 4 * 16)
                box.put(None)
                self.assertEqual(list(stream), [])
            idle_channel.close()


def main():
    global ARGS
    ARGS, rest = parse_ropeserve_args(__doc__)
    run_tests_needing(stubs, rest)


if __name__ == "__main__":
    main()
