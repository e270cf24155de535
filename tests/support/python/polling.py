"""Bounded waits for a server's state to settle.

A client sees a call's status before the server has run the call's OnDone
(gRPC runs it once the reply is acknowledged, later still under load or
ASan), and OnDone is where the call's bytes return to the in-flight budget.
Tests that check "every byte returned" therefore wait for it, within a
bound, instead of reading the figure once.
"""

import time


def wait_for(read, settled, timeout, interval=0.05):
    """Calls read() until settled(value) or `timeout` s pass; the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if settled(value) or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def settled_server_info(stub, rope_pb2, timeout, settled=lambda info: info.inflight_bytes.bytes == 0):
    """GetServerInfo once `settled(info)` (by default: no bytes in flight), or the last reply."""
    return wait_for(lambda: stub.GetServerInfo(rope_pb2.GetServerInfoRequest(), timeout=timeout),
                    settled, timeout)
