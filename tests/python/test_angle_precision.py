"""RopeConfig.angle_precision "float32": transformers' float32 angles, bit for bit.

The reference is torch itself, computing what transformers' rotary modules
compute (LlamaRotaryEmbedding: _compute_default_rope_parameters, the linear
and llama3 rope_init_fns, forward's float32 matmul and cos / sin), written
out here. GetTable's inv_freq and every cos / sin value must equal torch's
bits. torch's float32 cos and sin are SLEEF's AVX2 functions on an AVX2 CPU
(the server's choice too); elsewhere the server's correctly rounded values
are within 1 ulp, which is what is then checked.
"""

import math

import numpy as np
import pytest
import torch

import ropeserve

AVX2 = "CPU capability usage: AVX2" in torch.__config__.show()


def default_inv_freq(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def llama3_inv_freq(base, dim, factor, low, high, old_len):
    inv_freq = default_inv_freq(base, dim)
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    inv_llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_llama)


def cos_sin(inv_freq, positions):
    """LlamaRotaryEmbedding.forward, half width: [count, dim/2] of its cos and sin. As there,
    cos and sin run over the contiguous cat(freqs, freqs) (torch's vectorized kernel; on
    the transposed freqs view it would take its scalar loop, another cosf)."""
    inv = inv_freq[None, :, None].float()
    pos = torch.as_tensor(positions, dtype=torch.int64)[None, None, :].float()
    freqs = (inv @ pos).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    half = inv_freq.shape[0]
    return emb.cos()[0, :, :half], emb.sin()[0, :, :half], freqs[0]


CASES = {
    "llama2": (dict(theta=10000.0, head_dim=128), lambda: default_inv_freq(10000.0, 128)),
    "qwen3": (dict(theta=1000000.0, head_dim=128), lambda: default_inv_freq(1000000.0, 128)),
    "gpt-oss-like": (dict(theta=150000.0, head_dim=64), lambda: default_inv_freq(150000.0, 64)),
    "linear": (dict(theta=10000.0, head_dim=64, scaling=ropeserve.LinearScaling(factor=4.0)),
               lambda: default_inv_freq(10000.0, 64) / 4.0),
    "llama3.1": (dict(theta=500000.0, head_dim=128, scaling=ropeserve.Llama3Scaling()),
                 lambda: llama3_inv_freq(500000.0, 128, 8.0, 1.0, 4.0, 8192)),
}


def assert_bits_or_one_ulp(got, want, what):
    got = np.asarray(got, dtype=np.float32)
    want = want.numpy()
    if AVX2:
        mismatches = int((got.view(np.int32) != want.view(np.int32)).sum())
        assert mismatches == 0, "%s: %d of %d values differ from torch's bits" % (what, mismatches, got.size)
    else:
        ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
        assert int(ulps.max()) <= 1, what


@pytest.mark.parametrize("case", list(CASES))
def test_table_is_transformers_float32_bit_for_bit(client, case):
    fields, inv_freq = CASES[case]
    config = ropeserve.RopeConfig(max_len=1 << 17, layout="half", angle_precision="float32", **fields)
    want_inv = inv_freq()
    for start, count in ((0, 300), (40000 - 150, 300), ((1 << 17) - 257, 257)):
        table = client.table(config, start=start, count=count)
        assert np.array_equal(table.inv_freq.astype(np.float32).view(np.int32),
                              want_inv.numpy().view(np.int32)), case
        assert np.array_equal(table.inv_freq, table.inv_freq.astype(np.float32).astype(np.float64))
        want_cos, want_sin, _ = cos_sin(want_inv, range(start, start + count))
        assert_bits_or_one_ulp(table.cos, want_cos, "%s cos rows %d+" % (case, start))
        assert_bits_or_one_ulp(table.sin, want_sin, "%s sin rows %d+" % (case, start))


def test_exact_and_float32_differ_where_float32_angles_lose_precision(client):
    fields = dict(theta=10000.0, head_dim=128, max_len=65536, layout="half")
    exact = client.table(ropeserve.RopeConfig(**fields), start=40000, count=1)
    float32 = client.table(ropeserve.RopeConfig(angle_precision="float32", **fields), start=40000, count=1)
    gap = float(np.abs(exact.cos - float32.cos).max())
    assert 1e-4 < gap < 1e-2, gap  # float32 angles: position * 2^-24 rad of error
    # The exact table is what float64 says.
    angles = 40000 * 10000.0 ** (-np.arange(0, 128, 2) / 128)
    assert np.abs(exact.cos[0] - np.cos(angles)).max() < 1e-7


def test_rotate_uses_the_float32_table(client):
    config = ropeserve.RopeConfig(head_dim=64, max_len=50000, theta=10000.0, layout="half",
                                  angle_precision="float32")
    q = torch.randn(1, 3, 2, 64)
    positions = [0, 17, 49999]
    q_out, _ = client.rotate(q, config=config, positions=positions)
    cos, sin, _ = cos_sin(default_inv_freq(10000.0, 64), positions)
    cos, sin = torch.cat((cos, cos), -1)[None, :, None], torch.cat((sin, sin), -1)[None, :, None]
    half = torch.cat((-q[..., 32:], q[..., :32]), -1)
    assert torch.allclose(q_out, q * cos + half * sin, atol=2e-6, rtol=0)


def test_other_scalings_are_refused_naming_the_field(client):
    config = ropeserve.RopeConfig(head_dim=64, max_len=64, angle_precision="float32",
                                  scaling=ropeserve.YarnScaling(factor=4.0, original_max_position_embeddings=16))
    with pytest.raises(ropeserve.InvalidArgument, match="config.angle_precision is ANGLE_FLOAT32 with scaling yarn"):
        client.table(config, count=1)
    with pytest.raises(ValueError, match="angle_precision is 'double'"):
        ropeserve.RopeConfig(head_dim=64, max_len=64, angle_precision="double")


def test_resolve_keeps_it_and_the_table_key_names_it(client):
    config = ropeserve.RopeConfig(head_dim=64, max_len=64, angle_precision="float32")
    resolved = client.resolve(config)
    assert resolved.config.angle_precision == "float32"
    assert resolved.message.table_key.endswith(" angles=float32")
    assert not client.resolve(config.replace(angle_precision="exact")).message.table_key.endswith("float32")
