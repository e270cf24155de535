"""The hand-written protobuf framing agrees with protobuf, and replies are viewed, not copied."""

import numpy as np
import pytest
import torch

from ropeserve import _calls, _tensors, _wire
from ropeserve.proto import rope_pb2 as pb

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("value", [1, 127, 128, 300, 2 ** 21, 2 ** 35 + 5])
def test_varint_matches_protobuf(value):
    encoded = pb.GetTableRequest(start=value).SerializeToString()
    assert encoded == b"\x10" + _wire.varint(value)


def test_request_framing_parses_to_the_same_message_as_protobuf_builds():
    q = RNG.standard_normal((2, 3, 4, 8)).astype(np.float32)
    k = RNG.standard_normal((2, 3, 1, 8)).astype(np.float32)
    config = _calls.RopeConfig(head_dim=8, max_len=64, layout="half")
    request, _ = _calls.rotate(q, k, config=config, positions=[1, 2, 3], inverse=True)
    want = pb.RotateRequest(
        config=config.to_proto(), positions=[1, 2, 3], inverse=True,
        q=pb.Tensor(dtype=pb.FLOAT32, shape=[2, 3, 4, 8], data=q.tobytes()),
        k=pb.Tensor(dtype=pb.FLOAT32, shape=[2, 3, 1, 8], data=k.tobytes()))
    assert pb.RotateRequest.FromString(request) == want


def test_bfloat16_tensors_travel_as_their_bits():
    q = torch.tensor([[[[1.0, -2.5, 3.0e-3, 65280.0]]]], dtype=torch.bfloat16)
    request, _ = _calls.rotate(q, config=_calls.RopeConfig(head_dim=4, max_len=8))
    sent = pb.RotateRequest.FromString(request).q
    assert sent.dtype == pb.BFLOAT16
    assert sent.data == q.view(torch.int16).numpy().tobytes()


@pytest.fixture
def split_every_reply(monkeypatch):
    """The zero-copy split for replies of any size (normally from VIEW_MIN_BYTES on)."""
    monkeypatch.setattr(_wire, "VIEW_MIN_BYTES", 0)


def _reply(tensors, **fields):
    return pb.RotateResponse(**{name: pb.Tensor(dtype=pb.FLOAT16, shape=list(a.shape), data=a.tobytes())
                                for name, a in tensors.items()}, **fields).SerializeToString()


def test_split_reply_views_tensor_bytes_in_the_reply_buffer(split_every_reply):
    q = RNG.standard_normal((1, 2, 3, 4)).astype(np.float16)
    k = RNG.standard_normal((1, 2, 1, 4)).astype(np.float16)
    buf = _reply({"q": q, "k": k})
    _, tensors = _wire.split_reply(pb.RotateResponse, buf)
    assert tensors["q"].shape == (1, 2, 3, 4) and tensors["q"].dtype == pb.FLOAT16
    assert bytes(tensors["q"].data) == q.tobytes() and bytes(tensors["k"].data) == k.tobytes()
    whole = np.frombuffer(buf, np.uint8)
    assert np.shares_memory(whole, np.frombuffer(tensors["q"].data, np.uint8))


def test_decode_views_aligned_data_and_copies_misaligned_data(split_every_reply):
    like_numpy = _tensors.TensorIn("numpy", pb.FLOAT32, (), None)
    like_torch = _tensors.TensorIn("torch", pb.FLOAT32, (), None)
    seen = set()
    for shape in ((1, 1, 1, 4), (1, 1, 2, 40), (1, 3, 1, 200), (2, 1, 1, 5000), (1, 1, 300, 9)):
        # The shape's and lengths' varints move the data's offset in the reply.
        a = RNG.standard_normal(shape).astype(np.float32)
        buf = pb.RotateResponse(q=pb.Tensor(dtype=pb.FLOAT32, shape=list(a.shape),
                                            data=a.tobytes())).SerializeToString()
        _, tensors = _wire.split_reply(pb.RotateResponse, buf)
        whole = np.frombuffer(buf, np.uint8)
        aligned = np.frombuffer(tensors["q"].data, np.uint8).ctypes.data % 4 == 0
        seen.add(aligned)
        out = _tensors.decode("q", tensors["q"], like_numpy)
        np.testing.assert_array_equal(out, a)
        assert out.flags.aligned and not out.flags.writeable
        assert np.shares_memory(whole, out) == aligned
        t = _tensors.decode("q", tensors["q"], like_torch)
        np.testing.assert_array_equal(t.numpy(), a)
        assert t.data_ptr() % 4 == 0
        assert (whole.ctypes.data <= t.data_ptr() < whole.ctypes.data + len(buf)) == aligned
    assert seen == {True, False}


def test_small_replies_are_parsed_by_protobuf_alike():
    q = RNG.standard_normal((1, 2, 3, 4)).astype(np.float16)
    buf = _reply({"q": q})
    assert len(buf) < _wire.VIEW_MIN_BYTES
    _, tensors = _wire.split_reply(pb.RotateResponse, buf)
    assert set(tensors) == {"q"} and tensors["q"].shape == q.shape and bytes(tensors["q"].data) == q.tobytes()
    out = _tensors.decode("q", tensors["q"], _tensors.TensorIn("numpy", pb.FLOAT16, (), None))
    np.testing.assert_array_equal(out, q)
    assert out.flags.aligned and not out.flags.writeable


def test_repeated_tensor_field_falls_back_to_protobuf_merging(split_every_reply):
    a = np.arange(4, dtype=np.float16).reshape(1, 1, 1, 4)
    b = np.arange(4, 8, dtype=np.float16).reshape(1, 1, 1, 4)
    buf = _reply({"q": a}) + _reply({"q": b})  # protobuf: the second data wins, shapes concatenate
    _, tensors = _wire.split_reply(pb.RotateResponse, buf)
    assert bytes(tensors["q"].data) == b.tobytes()
    assert tensors["q"].shape == (1, 1, 1, 4, 1, 1, 1, 4)
