"""One Client over several servers: round robin, failover on drain, and threads sharing it."""

import threading
import time

import numpy as np

import ropeserve
from conftest import start_server

CONFIG = ropeserve.RopeConfig(head_dim=16, max_len=64)
Q = np.ones((1, 2, 2, 16), np.float32)


def rotate_count(server):
    return server.request_counts().get(("Rotate", "OK"), 0)


def test_round_robin_spreads_calls_and_survives_a_draining_server():
    with start_server(metrics=True) as a, start_server(metrics=True) as b:
        with ropeserve.Client("ipv4:%s,%s" % (a.address, b.address), deadline=20.0) as client:
            want, _ = client.rotate(Q, config=CONFIG)
            # Round robin picks among connections that are ready: on a loaded
            # machine the second one may still be connecting for the first
            # calls. Bounded warm-up until both have served.
            deadline = time.monotonic() + 20
            while (rotate_count(a) == 0 or rotate_count(b) == 0) and time.monotonic() < deadline:
                client.rotate(Q, config=CONFIG)
            before_a, before_b = rotate_count(a), rotate_count(b)
            for _ in range(20):
                got, _ = client.rotate(Q, config=CONFIG)
                np.testing.assert_array_equal(got, want)
            assert rotate_count(a) - before_a >= 5 and rotate_count(b) - before_b >= 5, (
                before_a, before_b, rotate_count(a), rotate_count(b))
            served_by_b = rotate_count(b)
            a.proc.terminate()  # drains: NOT_SERVING, then UNAVAILABLE, then gone
            # Calls from here on meet a draining server (its gate refuses before
            # the line is printed): without this wait, a's signal thread lagging
            # on a busy machine would let a serve more than 10 of the 30.
            assert a.wait_for_output(r"signal \d+: draining", timeout=30), a.output[-2000:]
            for _ in range(30):
                got, _ = client.rotate(Q, config=CONFIG)  # retried / rebalanced onto b
                np.testing.assert_array_equal(got, want)
            assert a.stop() == 0
            assert rotate_count(b) >= served_by_b + 20


def test_threads_share_one_client(client):
    rng = np.random.default_rng(8)
    inputs = [rng.standard_normal((1, 3, 2, 16)).astype(np.float32) for _ in range(8)]
    expected = [client.rotate(x, config=CONFIG, start_pos=i)[0] for i, x in enumerate(inputs)]
    failures = []

    def worker(i):
        try:
            for _ in range(10):
                got, _ = client.rotate(inputs[i], config=CONFIG, start_pos=i)
                np.testing.assert_array_equal(got, expected[i])
        except Exception as e:  # pylint: disable=broad-except
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures
