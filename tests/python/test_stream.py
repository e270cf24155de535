"""Client.rotate_stream: one stream, replies in order, errors ending it as documented."""

import numpy as np
import pytest
import torch

import ropeserve

CONFIG = ropeserve.RopeConfig(head_dim=16, max_len=64, layout="half")
RNG = np.random.default_rng(11)


def steps(n):
    """Decode steps: one token each, at positions 10, 11, ..."""
    return [dict(q=RNG.standard_normal((1, 1, 4, 16)).astype(np.float32),
                 k=RNG.standard_normal((1, 1, 2, 16)).astype(np.float32), start_pos=10 + i) for i in range(n)]


def test_stream_replies_match_unary_calls_in_order(client):
    requests = steps(6)
    got = list(client.rotate_stream(iter(requests), config=CONFIG))
    assert len(got) == 6
    for request, (q_out, k_out) in zip(requests, got):
        want_q, want_k = client.rotate(request["q"], request["k"], config=CONFIG, start_pos=request["start_pos"])
        np.testing.assert_array_equal(q_out, want_q)
        np.testing.assert_array_equal(k_out, want_k)


def test_stream_takes_rotate_requests_with_their_own_configs_and_a_generator(client):
    interleaved = CONFIG.replace(layout="interleaved")
    q = torch.randn(1, 3, 2, 16, dtype=torch.bfloat16)

    def generate():
        yield ropeserve.RotateRequest(q=q, positions=[1, 2, 3])
        yield ropeserve.RotateRequest(q=q, positions=[1, 2, 3], config=interleaved)
        yield ropeserve.RotateRequest(q=q, positions=[1, 2, 3], inverse=True)

    (a, _), (b, _), (c, _) = client.rotate_stream(generate(), config=CONFIG)
    assert torch.equal(a, client.rotate(q, config=CONFIG, positions=[1, 2, 3])[0])
    assert torch.equal(b, client.rotate(q, config=interleaved, positions=[1, 2, 3])[0])
    assert torch.equal(c, client.rotate(q, config=CONFIG, positions=[1, 2, 3], inverse=True)[0])
    assert not torch.equal(a, b)


def test_server_error_ends_the_stream_after_the_earlier_replies(client):
    requests = steps(4)
    requests[2]["start_pos"] = 64  # past max_len
    replies = []
    with pytest.raises(ropeserve.OutOfRange, match="max_len 64"):
        for reply in client.rotate_stream(requests, config=CONFIG):
            replies.append(reply)
    assert len(replies) == 2


def test_bad_request_ends_the_stream_with_its_value_error(client):
    requests = steps(3)
    requests[1]["q"] = requests[1]["q"].astype(np.int32)
    replies = []
    with pytest.raises(ValueError, match="q has dtype int32"):
        for reply in client.rotate_stream(requests, config=CONFIG):
            replies.append(reply)
    assert len(replies) == 1


def test_request_without_config_or_with_unknown_keys_is_refused(client):
    with pytest.raises(ValueError, match="has no config"):
        list(client.rotate_stream(steps(1)))
    with pytest.raises(TypeError, match=r"unknown request keys \['start'\]"):
        list(client.rotate_stream([dict(q=steps(1)[0]["q"], start=3)], config=CONFIG))
    with pytest.raises(TypeError, match="a request is a int"):
        list(client.rotate_stream([3], config=CONFIG))


def test_abandoned_stream_is_cancelled_and_the_client_still_works(client):
    stream = client.rotate_stream(steps(8), config=CONFIG)
    next(stream)
    stream.close()
    assert client.info().backend == "cpu"
