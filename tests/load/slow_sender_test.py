#!/usr/bin/python3
"""Slow senders (slowloris) cannot hold a connection, nor its transport memory,
forever: --max_connection_age + --max_connection_age_grace bound it.

A raw HTTP/2 client (sockets and hand-made frames, no gRPC library: it must
misbehave) opens CONNECTIONS connections, starts on each a Rotate call whose
gRPC frame declares 16 MiB, then trickles 1 KiB of it every 100 ms. Against a
ropeserve with --max_connection_age=1s --max_connection_age_grace=1s every one
must be closed by the server within BOUND_S (age 1 s + 10% jitter + grace 1 s
+ slack), while an ordinary client's Rotate calls on another connection keep
succeeding. A control run with an infinite grace shows the same client is still
connected after that bound (so the bound is the grace's doing).

Exit status: 0 pass, 1 fail, 77 skipped (no grpcio).
"""

import argparse
import socket
import struct
import sys
import threading
import time

from ropeserve_process import RopeServe

try:
    import grpc
except ImportError:
    print("SKIP: grpcio is not available to %s" % sys.executable)
    sys.exit(77)

CONNECTIONS = 8
BOUND_S = 6.0
TRICKLE_BYTES = 1024
TRICKLE_PAUSE_S = 0.1


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream) + payload


def header(name, value):
    """HPACK literal header field without indexing, new name, no Huffman."""
    name, value = name.encode(), value.encode()
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def trickle(address, seconds, result, index):
    """Trickles one large Rotate; records when the server closed the connection."""
    host, port = address.rsplit(":", 1)
    start = time.monotonic()
    try:
        sock = socket.create_connection((host, int(port)), timeout=5)
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
        headers = b"".join(header(k, v) for k, v in [
            (":method", "POST"), (":scheme", "http"), (":path", "/rope.v1.RopeService/Rotate"),
            (":authority", address), ("content-type", "application/grpc"), ("te", "trailers")])
        sock.sendall(frame(1, 4, 1, headers))  # HEADERS, END_HEADERS
        sock.sendall(frame(0, 0, 1, b"\x00" + struct.pack(">I", 16 << 20)))
        sock.settimeout(TRICKLE_PAUSE_S)
        while time.monotonic() - start < seconds:
            try:
                sock.sendall(frame(0, 0, 1, b"\x00" * TRICKLE_BYTES))
            except OSError:
                result[index] = time.monotonic() - start
                return
            try:
                if not sock.recv(65536):
                    result[index] = time.monotonic() - start
                    return
            except socket.timeout:
                pass
            except OSError:
                result[index] = time.monotonic() - start
                return
        result[index] = None  # still open
    finally:
        try:
            sock.close()
        except (OSError, UnboundLocalError):
            pass


def ordinary_calls(address, stop, outcomes):
    """GetServerInfo calls (an empty request) through grpcio until `stop`;
    appends each status code."""
    channel = grpc.insecure_channel(address)
    call = channel.unary_unary("/rope.v1.RopeService/GetServerInfo",
                               request_serializer=None, response_deserializer=None)
    while not stop.is_set():
        try:
            call(b"", timeout=5)
            outcomes.append("OK")
        except grpc.RpcError as e:
            outcomes.append(str(e.code()))
        time.sleep(0.1)
    channel.close()


def run(ropeserve, grace):
    args = ["--backend=cpu", "--max_connection_age=1s", "--max_connection_age_grace=" + grace,
            "--max_inflight_bytes=%d" % (96 << 20)]
    with RopeServe(ropeserve, args) as server:
        closed = [None] * CONNECTIONS
        stop = threading.Event()
        outcomes = []
        caller = threading.Thread(target=ordinary_calls, args=(server.address, stop, outcomes))
        caller.start()
        threads = [threading.Thread(target=trickle, args=(server.address, BOUND_S, closed, i))
                   for i in range(CONNECTIONS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(BOUND_S + 10)
        stop.set()
        caller.join(10)
        exit_code = server.stop()
    return closed, outcomes, exit_code


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ropeserve", required=True)
    args = parser.parse_args()
    failures = []
    closed, outcomes, exit_code = run(args.ropeserve, "1s")
    print("grace 1s: connections closed after %s s; ordinary calls %s"
          % (["%.1f" % c if c is not None else "never" for c in closed],
             {o: outcomes.count(o) for o in set(outcomes)}))
    if any(c is None for c in closed):
        failures.append("a trickling connection was still open after %.0f s" % BOUND_S)
    if not outcomes or set(outcomes) != {"OK"}:
        failures.append("ordinary calls did not all succeed meanwhile: %s" % outcomes)
    if exit_code != 0:
        failures.append("ropeserve exited %s after SIGTERM" % exit_code)
    control, _, _ = run(args.ropeserve, "inf")
    print("grace inf (control): connections closed after %s s"
          % ["%.1f" % c if c is not None else "never" for c in control])
    if all(c is not None for c in control):
        failures.append("with an infinite grace the trickling connections were closed too: "
                        "the test cannot tell the grace's bound apart")
    for failure in failures:
        print("FAIL: " + failure, file=sys.stderr)
    if not failures:
        print("PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
