#!/usr/bin/python3
"""Idle streams are bounded in time and per client; one client's share of the
in-flight bytes is bounded.

Against a real ropeserve, with raw HTTP/2 clients (Debian's python3-h2), some
of them from the source address 127.0.0.2 so that the server sees two clients
(a client with no token or certificate is its address without the port):

- --stream_idle_timeout: an idle RotateStream and an idle ModelStreamInfer
  are finished by the server with UNAVAILABLE naming the flag, while a
  RotateStream on the same connection that keeps sending is served
  throughout and ends OK. (Before, an idle stream lived until its connection
  aged out.)
- --max_streams_per_client: one client's streams, over two connections, are
  counted together: one past the limit is refused at open with
  RESOURCE_EXHAUSTED naming the client's count and the flag, another
  client's stream is served meanwhile, and a stream that ends gives its
  place back.
- --max_inflight_bytes_per_client: a client that never reads two large
  GetTable replies holds its share of the budget (the second waits), and
  another client's large call is served at once instead of waiting for the
  unread replies' send deadline. (Before, one client could take the whole
  budget.)

Needs the ropeserve Python package (its generated rope_pb2); gRPC from
Debian's python3-grpcio.

Usage: stream_limits_test.py --ropeserve PATH
"""

import socket
import struct
import time
import unittest
from urllib.parse import unquote

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings

from polling import wait_for
from ropeserve_process import RopeServe
from server_test_main import parse_ropeserve_args, run_tests_needing

ARGS = None
DEADLINE_S = 30
IDLE_TIMEOUT_S = 2
ROTATE_STREAM = "/rope.v1.RopeService/RotateStream"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
GET_TABLE = "/rope.v1.RopeService/GetTable"
# GetTable of ROWS x HEAD_DIM: cos and sin, 8 MiB together; charged twice to
# the budget (the message and its serialized copy).
HEAD_DIM = 128
ROWS = 16384
REPLY_BYTES = ROWS * HEAD_DIM * 4
CHARGE = 2 * REPLY_BYTES


def stubs():
    from ropeserve.proto import rope_pb2, rope_pb2_grpc
    return rope_pb2, rope_pb2_grpc


def rotate_message(rope_pb2):
    request = rope_pb2.RotateRequest()
    request.config.head_dim = 8
    request.config.max_len = 64
    request.q.dtype = rope_pb2.FLOAT32
    request.q.shape.extend([1, 2, 1, 8])
    request.q.data = bytes(4 * 16)
    return request.SerializeToString()


def table_request(rope_pb2):
    request = rope_pb2.GetTableRequest()
    request.config.head_dim = HEAD_DIM
    request.config.max_len = ROWS
    return request


class Stream:
    def __init__(self):
        self.headers = False
        self.received = b""   # DATA bytes (gRPC-framed replies)
        self.status = None    # grpc-status, once the trailers came
        self.message = ""     # grpc-message
        self.reset = False

    @property
    def ended(self):
        return self.status is not None or self.reset

    def replies(self):
        """Complete gRPC messages received so far."""
        count, at = 0, 0
        while at + 5 <= len(self.received):
            length = struct.unpack(">I", self.received[at + 1:at + 5])[0]
            if at + 5 + length > len(self.received):
                break
            count, at = count + 1, at + 5 + length
        return count


class H2Client:
    """One raw HTTP/2 connection from `source` to the server. With
    `read=False` it announces a stream window of 0 and never acknowledges
    data (replies are never read)."""

    def __init__(self, port, source="127.0.0.1", read=True):
        self.sock = socket.socket()
        self.sock.bind((source, 0))
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        self.read = read
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        window = 1 << 24 if read else 0
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.conn.initiate_connection()
        if read:
            self.conn.increment_flow_control_window(1 << 24)
        self.streams = {}
        self._flush()

    def close(self):
        self.sock.close()

    def _flush(self):
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def open(self, path):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", path),
                                     (":authority", "ropeserve"),
                                     ("content-type", "application/grpc"), ("te", "trailers")])
        self.streams[sid] = Stream()
        self._flush()
        return sid

    def send(self, sid, message, end=False):
        self.conn.send_data(sid, b"\x00" + struct.pack(">I", len(message)) + message,
                            end_stream=end)
        self._flush()

    def end(self, sid):
        self.conn.end_stream(sid)
        self._flush()

    def pump(self, until, timeout=DEADLINE_S):
        """Handles what arrives until until() is true or `timeout` s passed;
        returns until()."""
        deadline = time.monotonic() + timeout
        while not until():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(min(remaining, 0.2))
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            if not data:
                return until()
            self._handle(self.conn.receive_data(data))
        return True

    def _handle(self, events):
        for event in events:
            stream = self.streams.get(getattr(event, "stream_id", None))
            if isinstance(event, h2.events.ResponseReceived) and stream:
                stream.headers = True
                self._trailers(stream, event.headers)  # a trailers-only answer
            elif isinstance(event, h2.events.DataReceived) and stream:
                stream.received += event.data
                if self.read:
                    self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                        event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived) and stream:
                self._trailers(stream, event.headers)
            elif isinstance(event, h2.events.StreamReset) and stream:
                stream.reset = True
        self._flush()

    @staticmethod
    def _trailers(stream, headers):
        fields = dict(headers)
        if "grpc-status" in fields:
            stream.status = int(fields["grpc-status"])
            stream.message = unquote(fields.get("grpc-message", ""))


class StreamIdleTimeout(unittest.TestCase):

    def test_idle_streams_are_finished_and_an_active_one_survives(self):
        rope_pb2, _ = stubs()
        message = rotate_message(rope_pb2)
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                        "--stream_idle_timeout=%ds" % IDLE_TIMEOUT_S,
                                        "--shutdown_grace_period=1s"], metrics=True) as server:
            client = H2Client(server.port)
            try:
                opened = time.monotonic()
                idle_rotate = client.open(ROTATE_STREAM)
                idle_infer = client.open(MODEL_STREAM_INFER)
                active = client.open(ROTATE_STREAM)
                sent = 0
                # The active stream sends every IDLE_TIMEOUT_S / 4 until the
                # idle ones have ended, and twice more after.
                after_end = 0
                last_reply = None
                while after_end < 2 and time.monotonic() - opened < DEADLINE_S:
                    client.send(active, message)
                    sent += 1
                    self.assertTrue(client.pump(lambda: client.streams[active].replies() == sent))
                    last_reply = time.monotonic()
                    client.pump(lambda: False, timeout=IDLE_TIMEOUT_S / 4)
                    if client.streams[idle_rotate].ended and client.streams[idle_infer].ended:
                        after_end += 1
                ended_after = time.monotonic() - opened
                for sid, rpc in ((idle_rotate, "RotateStream"),
                                 (idle_infer, "ModelStreamInfer")):
                    stream = client.streams[sid]
                    self.assertEqual(stream.status, grpc.StatusCode.UNAVAILABLE.value[0],
                                     (rpc, stream.status, stream.message, stream.reset))
                    self.assertIn("%s: no message for %ds (stream_idle_timeout %ds)"
                                  % (rpc, IDLE_TIMEOUT_S, IDLE_TIMEOUT_S), stream.message)
                self.assertGreaterEqual(ended_after, IDLE_TIMEOUT_S)
                self.assertIn("\nrope_streams_idle_finished_total 2\n", server.metrics_page())
                # The active stream was never idle that long: it is served
                # to the end, and its half-close ends it OK.
                self.assertFalse(client.streams[active].ended)
                # ... and was answered until more than a timeout after it
                # opened (read off the clock: a count of messages would
                # assume their speed).
                self.assertGreater(last_reply - opened, IDLE_TIMEOUT_S)
                client.end(active)
                self.assertTrue(client.pump(lambda: client.streams[active].ended))
                self.assertEqual(client.streams[active].status, 0,
                                 client.streams[active].message)
                self.assertEqual(client.streams[active].replies(), sent)
            finally:
                client.close()


class StreamsPerClient(unittest.TestCase):

    def test_one_client_past_its_streams_is_refused_and_another_served(self):
        rope_pb2, _ = stubs()
        message = rotate_message(rope_pb2)
        limit = 3
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                        "--max_streams_per_client=%d" % limit,
                                        "--shutdown_grace_period=1s"]) as server:
            first = H2Client(server.port)
            second = H2Client(server.port)  # the same client, another connection
            other = H2Client(server.port, source="127.0.0.2")
            try:
                held = [(first, first.open(ROTATE_STREAM)), (first, first.open(ROTATE_STREAM)),
                        (second, second.open(ROTATE_STREAM))]
                # Each is open once it has answered a message.
                for client, sid in held:
                    client.send(sid, message)
                    self.assertTrue(client.pump(lambda: client.streams[sid].replies() == 1))
                refused = second.open(ROTATE_STREAM)
                self.assertTrue(second.pump(lambda: second.streams[refused].ended))
                stream = second.streams[refused]
                self.assertEqual(stream.status, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                                 stream.message)
                self.assertIn("RotateStream refused at open: client peer:ipv4:127.0.0.1 has %d "
                              "streams open: its share is max_streams_per_client %d"
                              % (limit, limit), stream.message)
                # Another client is served meanwhile.
                theirs = other.open(ROTATE_STREAM)
                other.send(theirs, message)
                self.assertTrue(other.pump(lambda: other.streams[theirs].replies() == 1))
                other.end(theirs)
                self.assertTrue(other.pump(lambda: other.streams[theirs].ended))
                self.assertEqual(other.streams[theirs].status, 0)
                # A stream that ends gives its place back before its
                # trailers are sent: the client opens the next one at once,
                # without a retry.
                client, sid = held.pop()
                client.end(sid)
                self.assertTrue(client.pump(lambda: client.streams[sid].ended))
                self.assertEqual(client.streams[sid].status, 0)
                again = first.open(ROTATE_STREAM)
                first.send(again, message)
                first.pump(lambda: first.streams[again].ended
                           or first.streams[again].replies() == 1)
                self.assertEqual(first.streams[again].replies(), 1,
                                 first.streams[again].message)
            finally:
                for client in (first, second, other):
                    client.close()


class InflightBytesPerClient(unittest.TestCase):

    def test_a_client_holding_its_share_leaves_room_for_another(self):
        rope_pb2, rope_pb2_grpc = stubs()
        # Admitted calls' budget: 2.5 charges (half of --max_inflight_bytes);
        # a client's share: half of that, 1.25 charges. A client's first
        # unread GetTable fits its share, its second waits; another
        # client's GetTable fits beside the first. Without shares the second
        # unread reply would be admitted and the other client would wait
        # for --reply_send_timeout.
        max_inflight_bytes = 5 * CHARGE
        request = table_request(rope_pb2).SerializeToString()
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                        "--max_inflight_bytes=%d" % max_inflight_bytes,
                                        "--max_inflight_wait=60s",
                                        "--reply_send_timeout=60s",
                                        "--shutdown_grace_period=1s"]) as server:
            hog = H2Client(server.port, source="127.0.0.2", read=False)
            options = [("grpc.max_receive_message_length", 4 * REPLY_BYTES)]
            try:
                with grpc.insecure_channel(server.address, options=options) as channel:
                    stub = rope_pb2_grpc.RopeServiceStub(channel)

                    def info():
                        return stub.GetServerInfo(rope_pb2.GetServerInfoRequest(),
                                                  timeout=DEADLINE_S)

                    limits = info().limits
                    self.assertEqual(limits.max_inflight_bytes_per_client,
                                     max_inflight_bytes // 4)
                    first = hog.open(GET_TABLE)
                    hog.send(first, request, end=True)
                    self.assertTrue(hog.pump(lambda: hog.streams[first].headers))
                    second = hog.open(GET_TABLE)
                    hog.send(second, request, end=True)
                    self.assertEqual(wait_for(info, lambda i: i.inflight_bytes.waiters == 1,
                                              DEADLINE_S).inflight_bytes.waiters, 1)
                    started = time.monotonic()
                    reply = stub.GetTable(table_request(rope_pb2), timeout=DEADLINE_S)
                    self.assertEqual(len(reply.cos.data) + len(reply.sin.data), REPLY_BYTES)
                    # Served while the other client's unread replies are
                    # still held (their send deadline is 60 s away).
                    self.assertLess(time.monotonic() - started, 30)
                    hog.pump(lambda: False, timeout=0.2)
                    self.assertFalse(hog.streams[first].ended)
                    self.assertFalse(hog.streams[second].headers)
                    self.assertEqual(info().inflight_bytes.waiters, 1)
                    # The hog leaves: every byte returns.
                    hog.close()
                    settled = wait_for(info, lambda i: i.inflight_bytes.bytes == 0, DEADLINE_S)
                    self.assertEqual(settled.inflight_bytes.bytes, 0, settled.inflight_bytes)
            finally:
                hog.close()


class ServerLimitsAdvertised(unittest.TestCase):

    def test_get_server_info_names_the_stream_limits(self):
        rope_pb2, rope_pb2_grpc = stubs()
        with RopeServe(ARGS.ropeserve, ["--backend=cpu", "--cpu_threads=1",
                                        "--max_streams_per_client=7",
                                        "--stream_idle_timeout=90s",
                                        "--max_inflight_bytes=0",
                                        "--shutdown_grace_period=1s"]) as server:
            with grpc.insecure_channel(server.address) as channel:
                stub = rope_pb2_grpc.RopeServiceStub(channel)
                limits = stub.GetServerInfo(rope_pb2.GetServerInfoRequest(),
                                            timeout=DEADLINE_S).limits
                self.assertEqual(limits.max_streams_per_client, 7)
                self.assertEqual(limits.stream_idle_timeout_ms, 90000)
                self.assertEqual(limits.max_inflight_bytes_per_client, 0)  # no budget


def main():
    global ARGS
    ARGS, rest = parse_ropeserve_args(__doc__)
    run_tests_needing(stubs, rest)


if __name__ == "__main__":
    main()
