"""Client.rotate against the float64 reference: every dtype x layout, GQA, positions, inverse."""

import numpy as np
import pytest
import torch

import ropeserve
import rope_reference as ref
from tensor_kinds import KIND_IDS, KINDS, as_float64, check_kind, make

RNG = np.random.default_rng(20240515)


def config(layout, head_dim=16, rotary_dim=None, theta=10000.0, max_len=256, scaling=None):
    return ropeserve.RopeConfig(head_dim=head_dim, max_len=max_len, theta=theta, rotary_dim=rotary_dim,
                                layout=layout, scaling=scaling)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("kind,dtype", KINDS, ids=KIND_IDS)
def test_rotate_matches_reference_with_gqa(client, kind, dtype, layout):
    q = make(kind, dtype, RNG.standard_normal((2, 5, 4, 16)))
    k = make(kind, dtype, RNG.standard_normal((2, 5, 2, 16)))
    q_out, k_out = client.rotate(q, k, config=config(layout), start_pos=7)
    check_kind(q_out, kind, dtype, (2, 5, 4, 16))
    check_kind(k_out, kind, dtype, (2, 5, 2, 16))
    inv = ref.plain_inv_freq(10000.0, 16)
    positions = 7 + np.arange(5)
    half = layout == "half"
    ref.assert_close(as_float64(q_out), ref.rotate(as_float64(q), positions, inv, 16, half), dtype, what="q")
    ref.assert_close(as_float64(k_out), ref.rotate(as_float64(k), positions, inv, 16, half), dtype, what="k")


@pytest.mark.parametrize("kind,dtype", KINDS, ids=KIND_IDS)
def test_rotate_without_k_returns_none_for_k(client, kind, dtype):
    q = make(kind, dtype, RNG.standard_normal((3, 2, 8)))  # rank 3: [S, H, D]
    q_out, k_out = client.rotate(q, config=config("half", head_dim=8))
    assert k_out is None
    check_kind(q_out, kind, dtype, (3, 2, 8))
    want = ref.rotate(as_float64(q)[None], np.arange(3), ref.plain_inv_freq(10000.0, 8), 8, True)[0]
    ref.assert_close(as_float64(q_out), want, dtype)


def test_explicit_positions_shared_and_per_row(client):
    q = RNG.standard_normal((2, 4, 2, 16)).astype(np.float32)
    inv = ref.plain_inv_freq(500000.0, 16)
    cfg = config("half", theta=500000.0)
    shared = [3, 0, 17, 9]
    q_out, _ = client.rotate(q, config=cfg, positions=shared)
    ref.assert_close(q_out, ref.rotate(q, shared, inv, 16, True), "float32")
    per_row = np.array([[5, 6, 7, 8], [100, 0, 1, 255]])
    for positions in (per_row, per_row.tolist(), torch.from_numpy(per_row)):
        q_out, _ = client.rotate(q, config=cfg, positions=positions)
        ref.assert_close(q_out, ref.rotate(q, per_row, inv, 16, True), "float32")


def test_partial_rotary_leaves_the_rest_unchanged(client):
    q = RNG.standard_normal((1, 3, 2, 16)).astype(np.float32)
    q_out, _ = client.rotate(q, config=config("interleaved", rotary_dim=8), start_pos=2)
    np.testing.assert_array_equal(q_out[..., 8:], q[..., 8:])
    ref.assert_close(q_out, ref.rotate(q, 2 + np.arange(3), ref.plain_inv_freq(10000.0, 8), 8, False), "float32")


@pytest.mark.parametrize("kind,dtype", KINDS, ids=KIND_IDS)
def test_inverse_undoes_the_rotation(client, kind, dtype):
    q = make(kind, dtype, RNG.standard_normal((1, 6, 2, 16)))
    cfg = config("half")
    rotated, _ = client.rotate(q, config=cfg, start_pos=40)
    back, _ = client.rotate(rotated, config=cfg, start_pos=40, inverse=True)
    want = ref.rotate(as_float64(rotated), 40 + np.arange(6), ref.plain_inv_freq(10000.0, 16), 16, True,
                      inverse=True)
    ref.assert_close(as_float64(back), want, dtype)
    # Two roundings away from the input at most.
    ref.assert_close(as_float64(back), as_float64(q), dtype, absolute=4 * ref.RELATIVE_ULP[dtype] + 2e-6)


def test_scaled_config_applies_frequencies_and_attention_factor(client):
    q = RNG.standard_normal((1, 4, 2, 32)).astype(np.float32)
    scaling = ropeserve.YarnScaling(factor=4.0, original_max_position_embeddings=64)
    q_out, _ = client.rotate(q, config=config("half", head_dim=32, max_len=512, scaling=scaling),
                             positions=[0, 100, 300, 511])
    inv, attention = ref.inv_freq_and_attention("yarn", 10000.0, 32, factor=4.0,
                                                original_max_position_embeddings=64)
    assert attention > 1.1
    ref.assert_close(q_out, ref.rotate(q, [0, 100, 300, 511], inv, 32, True, attention=attention), "float32",
                     absolute=5e-6)


def test_non_contiguous_and_big_endian_inputs_give_the_same_bits(client):
    cfg = config("interleaved")
    base = RNG.standard_normal((2, 3, 5, 16)).astype(np.float32)
    q = np.ascontiguousarray(base)
    want, _ = client.rotate(q, config=cfg, start_pos=1)
    strided = np.swapaxes(base.copy().swapaxes(1, 2).copy(), 1, 2)  # same values, not C-contiguous
    assert not strided.flags.c_contiguous
    got, _ = client.rotate(strided, config=cfg, start_pos=1)
    np.testing.assert_array_equal(got, want)
    got, _ = client.rotate(q.astype(">f4"), config=cfg, start_pos=1)
    np.testing.assert_array_equal(got, want)
    t = torch.from_numpy(base).transpose(1, 2).contiguous().transpose(1, 2)
    assert not t.is_contiguous()
    got, _ = client.rotate(t, config=cfg, start_pos=1)
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("kind,dtype", [("numpy", "float32"), ("torch", "bfloat16")], ids=["numpy", "torch"])
def test_large_replies_are_viewed_and_still_exact(client, kind, dtype):
    q = make(kind, dtype, RNG.standard_normal((1, 64, 8, 64)))  # replies past _wire.VIEW_MIN_BYTES
    k = make(kind, dtype, RNG.standard_normal((1, 64, 2, 64)))
    q_out, k_out = client.rotate(q, k, config=config("half", head_dim=64), start_pos=100)
    positions = 100 + np.arange(64)
    inv = ref.plain_inv_freq(10000.0, 64)
    ref.assert_close(as_float64(q_out), ref.rotate(as_float64(q), positions, inv, 64, True), dtype, what="q")
    ref.assert_close(as_float64(k_out), ref.rotate(as_float64(k), positions, inv, 64, True), dtype, what="k")
    if kind == "numpy":
        assert not q_out.flags.writeable and q_out.flags.aligned


def test_inputs_that_require_grad_are_accepted(client):
    q = torch.randn(1, 2, 2, 16, requires_grad=True)
    q_out, _ = client.rotate(q, config=config("half"))
    assert not q_out.requires_grad
    assert q_out.shape == q.shape


def test_numpy_results_are_read_only_and_aligned(client):
    for d in (8, 10, 16, 18):  # header sizes move the data's offset in the reply
        q = RNG.standard_normal((1, 3, 1, d)).astype(np.float16)
        q_out, _ = client.rotate(q, config=config("half", head_dim=d))
        assert not q_out.flags.writeable
        assert q_out.flags.aligned
        t_out, _ = client.rotate(torch.from_numpy(q), config=config("half", head_dim=d))
        assert t_out.data_ptr() % 2 == 0
        t_out += 1  # torch results are writable


# ---- Conversions (the rule of ropeserve._tensors, as ropectl's .npy inputs) ----------

def test_float64_is_sent_as_float32_rounded_once(client):
    rng = np.random.default_rng(5)
    q64 = rng.standard_normal((1, 3, 2, 16))
    config = ropeserve.RopeConfig(head_dim=16, max_len=64)
    q_out, _ = client.rotate(q64, config=config, start_pos=4)
    want, _ = client.rotate(q64.astype(np.float32), config=config, start_pos=4)
    assert q_out.dtype == np.float32 and np.array_equal(q_out, want)
    t_out, _ = client.rotate(torch.from_numpy(q64), config=config, start_pos=4)
    assert t_out.dtype == torch.float32 and np.array_equal(t_out.numpy(), want)


def test_float64_to_16_bits_rounds_once_not_twice(client):
    # 1 + 2^-8 + 2^-40 rounds up to bfloat16 1 + 2^-7 directly; through float32
    # (1 + 2^-8, a tie) it would round to even, 1.0. Position 0 leaves values as sent.
    value = 1.0 + 2.0 ** -8 + 2.0 ** -40
    q = np.full((1, 1, 1, 8), value)
    config = ropeserve.RopeConfig(head_dim=8, max_len=4)
    bits, _ = client.rotate(q, config=config, dtype="bfloat16")
    assert bits.dtype == np.uint16 and np.all(bits == 0x3F81)
    t_bits, _ = client.rotate(torch.from_numpy(q), config=config, dtype=torch.bfloat16)
    assert t_bits.dtype == torch.bfloat16 and torch.all(t_bits.float() == 1.0 + 2.0 ** -7)
    # float16: 1 + 2^-11 + 2^-40 rounds up to 1 + 2^-10.
    half, _ = client.rotate(np.full((1, 1, 1, 8), 1.0 + 2.0 ** -11 + 2.0 ** -40), config=config,
                            dtype="float16")
    assert half.dtype == np.float16 and np.all(half == np.float16(1.0 + 2.0 ** -10))


def test_int16_arrays_are_bfloat16_bits_with_dtype_bfloat16(client):
    q = torch.randn(1, 2, 2, 16).to(torch.bfloat16)
    config = ropeserve.RopeConfig(head_dim=16, max_len=64)
    want, _ = client.rotate(q, config=config, start_pos=9)
    for bits_dtype in (torch.int16,):
        bits = q.view(bits_dtype).numpy()
        got, _ = client.rotate(bits, config=config, start_pos=9, dtype="bfloat16")
        assert got.dtype == np.int16
        assert np.array_equal(got, want.view(torch.int16).numpy())
    got_u, _ = client.rotate(q.view(torch.int16).numpy().view(np.uint16), config=config, start_pos=9,
                             dtype="bfloat16")
    assert got_u.dtype == np.uint16 and np.array_equal(got_u.view(np.int16), want.view(torch.int16).numpy())
