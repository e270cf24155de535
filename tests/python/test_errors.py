"""Bad arguments fail before any call; the server's status codes arrive as RopeError subclasses."""

import grpc
import numpy as np
import pytest
import torch

import ropeserve
from conftest import start_server
from ropeserve import errors

CONFIG = ropeserve.RopeConfig(head_dim=8, max_len=32)
Q = np.zeros((1, 2, 2, 8), np.float32)


@pytest.fixture(scope="module")
def nowhere():
    """A client of an address nobody listens on: any call that is made fails with Unavailable."""
    with ropeserve.Client("127.0.0.1:1", deadline=5.0) as c:
        yield c


def test_a_call_to_nowhere_is_unavailable(nowhere):
    with pytest.raises(ropeserve.Unavailable):
        nowhere.rotate(Q, config=CONFIG)


BAD_ROTATE = [
    ("rank 2", dict(q=np.zeros((2, 8), np.float32)), ValueError, r"q has rank 2 \(shape \[2, 8\]\)"),
    ("rank 5", dict(q=np.zeros((1, 1, 1, 1, 8), np.float32)), ValueError, "q has rank 5"),
    ("numpy int32", dict(q=Q.astype(np.int32)), ValueError, "q has dtype int32"),
    ("numpy int16 without dtype", dict(q=Q.astype(np.int16)), ValueError,
     "raw bfloat16 bits and need dtype='bfloat16'"),
    ("unknown dtype", dict(dtype="float8"), ValueError, "dtype is 'float8'"),
    ("numpy int", dict(q=Q.astype(np.int16)), ValueError, "q has dtype int16"),
    ("torch int64", dict(q=torch.zeros(1, 2, 2, 8, dtype=torch.int64)), ValueError,
     "q has dtype torch.int64"),
    ("torch int", dict(q=torch.zeros(1, 2, 2, 8, dtype=torch.int32)), ValueError, "q has dtype torch.int32"),
    ("device", dict(q=torch.zeros(1, 2, 2, 8, device="meta")), ValueError,
     "q is on device meta: ropeserve takes CPU tensors"),
    ("sparse", dict(q=torch.zeros(1, 2, 2, 8).to_sparse()), ValueError, "q has layout torch.sparse_coo"),
    ("list", dict(q=[[[[0.0] * 8]]]), TypeError, "q is a builtins.list"),
    ("k kind", dict(k=torch.zeros(1, 2, 2, 8)), ValueError, "k is a torch tensor but q is a numpy one"),
    ("k dtype", dict(k=np.zeros((1, 2, 2, 8), np.float16)), ValueError,
     "k has dtype float16 but q has float32"),
    ("k rank", dict(k=np.zeros((2, 2, 8), np.float32)), ValueError, "k has rank 3 but q has rank 4"),
    ("k device", dict(q=torch.zeros(1, 2, 2, 8), k=torch.zeros(1, 2, 2, 8, device="meta")), ValueError,
     "k is on device meta"),
    ("string positions", dict(positions=["0", "1"]), ValueError,
     "positions has dtype <U1: expected integers, or floats for fractional positions"),
    ("positions rank", dict(positions=np.zeros((1, 1, 1, 2), np.int64)), ValueError, "positions has rank 4"),
    ("config type", dict(config={"head_dim": 8}), TypeError, "config is a dict"),
    ("start_pos type", dict(start_pos=1.5), TypeError, "start_pos is 1.5"),
]


@pytest.mark.parametrize("name,changes,error,message", BAD_ROTATE, ids=[b[0] for b in BAD_ROTATE])
def test_bad_rotate_arguments_raise_before_any_call(nowhere, name, changes, error, message):
    args = dict(q=Q, k=None, config=CONFIG)
    args.update(changes)
    with pytest.raises(error, match=message):
        nowhere.rotate(args.pop("q"), args.pop("k"), **args)


BAD_SCORES = [
    ("v dtype", dict(v=np.zeros((1, 2, 2, 8), np.float16)), ValueError, "v has dtype float16 but q has float32"),
    ("v kind", dict(v=torch.zeros(1, 2, 2, 8)), ValueError, "v is a torch tensor"),
    ("k missing", dict(k=None), TypeError, "k is a builtins.NoneType"),
    ("scale", dict(scale=-1.0), ValueError, "scale is -1.0"),
    ("q_start_pos", dict(q_start_pos="0"), TypeError, "q_start_pos is '0'"),
]


@pytest.mark.parametrize("name,changes,error,message", BAD_SCORES, ids=[b[0] for b in BAD_SCORES])
def test_bad_scores_arguments_raise_before_any_call(nowhere, name, changes, error, message):
    args = dict(q=Q, k=Q, v=None, config=CONFIG)
    args.update(changes)
    with pytest.raises(error, match=message):
        nowhere.attention_scores(args.pop("q"), args.pop("k"), args.pop("v"), **args)


def test_bad_table_arguments_raise_before_any_call(nowhere):
    with pytest.raises(TypeError, match="config is a str"):
        nowhere.table("llama")
    with pytest.raises(TypeError, match="count is 2.0"):
        nowhere.table(CONFIG, 0, 2.0)


@pytest.mark.parametrize("kwargs,message", [
    (dict(deadline=0), "deadline is 0"),
    (dict(deadline=-1.0), "deadline is -1.0"),
    (dict(deadline="30s"), "deadline is '30s'"),
    (dict(cert_file="c.pem"), "cert_file and key_file go together"),
    (dict(key_file="c.key", tls=True), "cert_file and key_file go together"),
    (dict(token="abc"), "token needs TLS"),
    (dict(token="two words", tls=True), "token must be printable ASCII without spaces"),
    (dict(token="", tls=True), "token is ''"),
])
def test_bad_client_options_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ropeserve.Client("127.0.0.1:1", **kwargs)
    with pytest.raises(ValueError, match=message):
        ropeserve.aio.Client("127.0.0.1:1", **kwargs)


def test_empty_target_is_refused():
    with pytest.raises(ValueError, match="target is ''"):
        ropeserve.Client("")


def test_invalid_argument_keeps_the_servers_message(client):
    config = ropeserve.RopeConfig(head_dim=7, max_len=32)
    with pytest.raises(ropeserve.InvalidArgument) as e:
        client.rotate(np.zeros((1, 2, 2, 7), np.float32), config=config)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "head_dim" in e.value.details and "7" in e.value.details
    assert str(e.value) == "INVALID_ARGUMENT: " + e.value.details
    assert isinstance(e.value.__cause__, grpc.RpcError)
    with pytest.raises(ropeserve.InvalidArgument, match=r"q heads \(3\) % k heads \(2\)"):
        client.attention_scores(np.zeros((1, 2, 3, 8), np.float32), np.zeros((1, 2, 2, 8), np.float32),
                                config=CONFIG)


def test_out_of_range_positions_and_table_rows(client):
    with pytest.raises(ropeserve.OutOfRange, match="max_len 32"):
        client.rotate(Q, config=CONFIG, start_pos=31)
    with pytest.raises(ropeserve.OutOfRange):
        client.rotate(Q, config=CONFIG, positions=[0, 32])
    with pytest.raises(ropeserve.OutOfRange):
        client.table(CONFIG, 30, 5)
    client.rotate(Q, config=CONFIG, start_pos=30)  # the server is fine afterwards


def test_deadline_exceeded():
    with start_server() as server, ropeserve.Client(server.address, deadline=1e-6) as c:
        with pytest.raises(ropeserve.DeadlineExceeded):
            c.rotate(np.zeros((1, 256, 8, 64), np.float32), config=ropeserve.RopeConfig(head_dim=64, max_len=256))


def test_resource_exhausted_names_the_limit():
    with start_server("--max_len_cap=64", "--max_elements_per_request=4096") as server:
        with ropeserve.Client(server.address, deadline=20.0) as c:
            assert c.info().limits.max_len_cap == 64
            with pytest.raises(ropeserve.ResourceExhausted, match="max_len"):
                c.rotate(Q, config=ropeserve.RopeConfig(head_dim=8, max_len=128))
            with pytest.raises(ropeserve.ResourceExhausted, match="elements"):
                c.rotate(np.zeros((1, 64, 16, 8), np.float32), config=CONFIG)


def test_every_status_code_has_its_own_class():
    seen = set()
    for code in grpc.StatusCode:
        if code == grpc.StatusCode.OK:
            continue
        cls = errors.error_class(code)
        assert cls is not ropeserve.RopeError and cls.code == code, code
        assert getattr(ropeserve, cls.__name__) is cls
        seen.add(cls)
        e = cls("details")
        assert isinstance(e, ropeserve.RopeError) and e.code == code and e.details == "details"
    assert len(seen) == len(grpc.StatusCode) - 1
