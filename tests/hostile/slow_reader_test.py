#!/usr/bin/python3
"""A reply its client never reads holds neither bytes nor a call slot for long.

One raw HTTP/2 client (Debian's python3-h2) announces a stream window of 0,
asks for an 8 MiB GetTable reply and never reads it: the reply's bytes (16
MiB with its serialized copy) stay charged to --max_inflight_bytes while
gRPC waits to send them. A second, well-behaved client then asks for the
same reply, which does not fit beside the first: it waits for room. After
--reply_send_timeout the server cancels the unread reply (the first client
gets CANCELLED trailers instead of its message), its bytes return, and the
second call is served, long before --max_inflight_wait would have refused
it; afterwards no byte is left charged. Likewise a RotateStream message
whose reply is never read gives the only call slot back once the deadline
has cancelled the stream. Without a send deadline the unread reply would
hold its bytes (and slot) until the connection aged out, and other
clients' calls would be refused meanwhile.
Needs the ropeserve Python package (its generated rope_pb2); gRPC from
Debian's python3-grpcio.

Usage: slow_reader_test.py --ropeserve PATH
"""

import socket
import struct
import threading
import time
import unittest

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings

from polling import settled_server_info
from ropeserve_process import RopeServe
from server_test_main import parse_ropeserve_args, run_tests_needing

ARGS = None
SEND_TIMEOUT_S = 2
INFLIGHT_WAIT_S = 20
DEADLINE_S = 60
HEAD_DIM = 128
ROWS = 16384  # cos and sin: ROWS x HEAD_DIM/2 floats each, 8 MiB together
REPLY_BYTES = ROWS * HEAD_DIM * 4
# Room for one such reply (charged twice: the message and its serialized
# copy), not two: half of --max_inflight_bytes is the admitted calls'.
MAX_INFLIGHT_BYTES = 2 * 3 * REPLY_BYTES


def stubs():
    from ropeserve.proto import rope_pb2, rope_pb2_grpc
    return rope_pb2, rope_pb2_grpc


def table_request(rope_pb2):
    request = rope_pb2.GetTableRequest()
    request.config.head_dim = HEAD_DIM
    request.config.max_len = ROWS
    return request


class NonReader(threading.Thread):
    """Sends one call (one message) with a stream window of 0 and never
    reads the reply; records when the reply's headers came (the server has it ready)
    and how the call ended without its message: the server's trailers
    (headers need no window), or a reset."""

    def __init__(self, port, path, message, end_stream=True):
        super().__init__(daemon=True)
        self.port, self.path, self.message = port, path, message
        self.end_stream = end_stream  # False: a stream kept open after its message
        self.reply_ready = threading.Event()
        self.ended = threading.Event()
        self.status = None  # grpc-status of the trailers, if they came
        self.error = None

    def run(self):
        try:
            self._run()
        except Exception as e:  # reported by the test
            self.error = e

    def _run(self):
        deadline = time.monotonic() + DEADLINE_S
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        try:
            conn.initiate_connection()
            conn.send_headers(1, [(":method", "POST"), (":scheme", "http"),
                                  (":path", self.path), (":authority", "ropeserve"),
                                  ("content-type", "application/grpc"), ("te", "trailers")])
            conn.send_data(1, b"\x00" + struct.pack(">I", len(self.message)) + self.message,
                           end_stream=self.end_stream)
            sock.sendall(conn.data_to_send())
            while time.monotonic() < deadline and not self.ended.is_set():
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    data = sock.recv(65536)
                except socket.timeout:
                    return
                if not data:
                    return
                # Settings and pings are answered (h2 does it), data never
                # acknowledged: the window stays shut.
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        self.reply_ready.set()
                    if isinstance(event, h2.events.TrailersReceived) and event.stream_id == 1:
                        self.status = dict(event.headers).get("grpc-status")
                        self.ended.set()
                    if isinstance(event, h2.events.StreamReset) and event.stream_id == 1:
                        self.ended.set()
                out = conn.data_to_send()
                if out:
                    sock.sendall(out)
        finally:
            sock.close()


class SlowReader(unittest.TestCase):

    def test_an_unread_reply_is_cancelled_and_its_bytes_released(self):
        rope_pb2, rope_pb2_grpc = stubs()
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                        "--max_inflight_bytes=%d" % MAX_INFLIGHT_BYTES,
                                        "--max_inflight_wait=%ds" % INFLIGHT_WAIT_S,
                                        "--reply_send_timeout=%ds" % SEND_TIMEOUT_S,
                                        "--shutdown_grace_period=1s"]) as server:
            reader = NonReader(server.port, "/rope.v1.RopeService/GetTable",
                               table_request(rope_pb2).SerializeToString())
            reader.start()
            self.assertTrue(reader.reply_ready.wait(DEADLINE_S), reader.error)
            options = [("grpc.max_receive_message_length", 4 * REPLY_BYTES)]
            with grpc.insecure_channel(server.address, options=options) as channel:
                stub = rope_pb2_grpc.RopeServiceStub(channel)
                info = stub.GetServerInfo(rope_pb2.GetServerInfoRequest(), timeout=DEADLINE_S)
                self.assertGreaterEqual(info.inflight_bytes.bytes, 2 * REPLY_BYTES)
                started = time.monotonic()
                reply = stub.GetTable(table_request(rope_pb2), timeout=DEADLINE_S)
                waited = time.monotonic() - started
                self.assertEqual(len(reply.cos.data) + len(reply.sin.data), REPLY_BYTES)
                self.assertLess(waited, INFLIGHT_WAIT_S)
                self.assertTrue(reader.ended.wait(DEADLINE_S),
                                "the unread reply was not cancelled (%r)" % (reader.error,))
                self.assertIn(reader.status, (None, "1"))  # a reset, or CANCELLED
                # Every byte returns (once OnDone has run: polling.py).
                info = settled_server_info(stub, rope_pb2, DEADLINE_S)
                self.assertEqual(info.inflight_bytes.bytes, 0)
            reader.join(DEADLINE_S)
            self.assertIsNone(reader.error)


class SlowStreamReader(unittest.TestCase):

    def test_an_unread_stream_reply_gives_its_call_slot_back(self):
        """A RotateStream message whose reply is never read holds the only
        call slot until --reply_send_timeout cancels the stream; then
        another client is served."""
        rope_pb2, rope_pb2_grpc = stubs()
        rotate = rope_pb2.RotateRequest()
        rotate.config.head_dim = 8
        rotate.config.max_len = 64
        rotate.q.dtype = rope_pb2.FLOAT32
        rotate.q.shape.extend([1, 2, 1, 8])
        rotate.q.data = bytes(4 * 16)
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                        "--max_concurrent_calls=1",
                                        "--reply_send_timeout=%ds" % SEND_TIMEOUT_S,
                                        "--shutdown_grace_period=1s"]) as server:
            reader = NonReader(server.port, "/rope.v1.RopeService/RotateStream",
                               rotate.SerializeToString(), end_stream=False)
            reader.start()
            self.assertTrue(reader.reply_ready.wait(DEADLINE_S), reader.error)
            self.assertTrue(reader.ended.wait(DEADLINE_S),
                            "the unread reply was not cancelled (%r)" % (reader.error,))
            self.assertIn(reader.status, (None, "1"))  # a reset, or CANCELLED
            with grpc.insecure_channel(server.address) as channel:
                stub = rope_pb2_grpc.RopeServiceStub(channel)
                # The slot returns once gRPC has ended the stream (OnDone),
                # just after its trailers: retry briefly, bounded.
                until = time.monotonic() + DEADLINE_S
                while True:
                    try:
                        reply = stub.Rotate(rotate, timeout=DEADLINE_S)
                        break
                    except grpc.RpcError as e:
                        if (e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED
                                or time.monotonic() > until):
                            raise
                        time.sleep(0.05)
                self.assertEqual(len(reply.q.data), 4 * 16)
            reader.join(DEADLINE_S)
            self.assertIsNone(reader.error)


def main():
    global ARGS
    ARGS, rest = parse_ropeserve_args(__doc__)
    run_tests_needing(stubs, rest)


if __name__ == "__main__":
    main()
