"""ropeserve.torch.RemoteRotaryEmbedding against a torch re-implementation of transformers.

(tests/python/transformers/ checks it, and patch_model, on transformers' own models.)

The reference restates, in torch, what transformers' LlamaRotaryEmbedding
(default and llama3 rope_init_fn, float32 frequencies and angles, cos/sin
times attention_scaling cast to the input dtype) and apply_rotary_pos_emb
(q * cos + rotate_half(q) * sin) compute, from modeling_llama.py and
modeling_rope_utils.py. 
Tolerances: the service computes angles in double and rounds once to the
storage dtype; transformers computes angles in float32 (error ~ position *
2^-24 rad) and, in bfloat16, rounds cos, sin, both products and the sum.
"""

import math

import numpy as np
import pytest
import torch

import ropeserve
from ropeserve.torch import RemoteRotaryEmbedding


# ---- transformers, restated --------------------------------------------------

def hf_default_inv_freq(base, dim):
    exponent = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (base ** exponent)


def hf_llama3_inv_freq(base, dim, factor, low_freq_factor, high_freq_factor, old_context_len):
    inv_freq = hf_default_inv_freq(base, dim)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def hf_cos_sin(x, position_ids, inv_freq, attention_scaling=1.0):
    """LlamaRotaryEmbedding.forward: [B, S, D] cos and sin in x's dtype."""
    inv = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    pos = position_ids[:, None, :].float()
    freqs = (inv @ pos).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * attention_scaling).to(x.dtype), (emb.sin() * attention_scaling).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


# ---- the comparisons -------------------------------------------------------------

LLAMA3 = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, old_context_len=8192)
CASES = {
    "default": (ropeserve.RopeConfig(head_dim=64, max_len=4096, theta=10000.0, layout="half"),
                lambda: hf_default_inv_freq(10000.0, 64)),
    "llama3": (ropeserve.RopeConfig(head_dim=64, max_len=16384, theta=500000.0, layout="half",
                                    scaling=ropeserve.Llama3Scaling()),
               lambda: hf_llama3_inv_freq(500000.0, 64, **LLAMA3)),
}
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3 * 2.0 ** -8}


def transformers_rope(q, k, position_ids, inv_freq):
    cos, sin = hf_cos_sin(q, position_ids, inv_freq)
    return apply_rotary_pos_emb(q, k, cos, sin)


def assert_matches(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = (got.double() - want.double()).abs()
    scale = want.double().abs() + 1
    assert torch.all(diff <= TOLERANCE[dtype] * scale), float((diff / scale).max())
    assert float(diff.mean()) < TOLERANCE[dtype] / 4  # no systematic error


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_matches_transformers_with_gqa_and_position_ids(client, case, dtype):
    config, inv_freq = CASES[case]
    torch.manual_seed(0)
    b, hq, hkv, s, d = 2, 8, 2, 12, 64
    q = torch.randn(b, hq, s, d).to(dtype)
    k = torch.randn(b, hkv, s, d).to(dtype)
    position_ids = torch.stack([torch.arange(s) + 100, torch.randperm(400)[:s]])  # per-row positions
    rope = RemoteRotaryEmbedding(client, config)
    q_out, k_out = rope.rotate(q, k, position_ids)
    want_q, want_k = transformers_rope(q, k, position_ids, inv_freq())
    assert_matches(q_out, want_q, dtype)
    assert_matches(k_out, want_k, dtype)


def test_shared_position_ids_and_default_positions(client):
    config, inv_freq = CASES["default"]
    rope = RemoteRotaryEmbedding(client, config)
    q = torch.randn(3, 4, 5, 64)
    k = torch.randn(3, 1, 5, 64)
    shared = torch.arange(5)[None] + 37
    q_out, k_out = rope.rotate(q, k, shared)  # [1, S] applies to every row
    want_q, want_k = transformers_rope(q, k, shared.expand(3, 5), inv_freq())
    assert_matches(q_out, want_q, torch.float32)
    assert_matches(k_out, want_k, torch.float32)
    q_default, k_none = rope.rotate(q)
    want_q, _ = transformers_rope(q, k, torch.arange(5)[None].expand(3, 5), inv_freq())
    assert k_none is None
    assert_matches(q_default, want_q, torch.float32)


def test_gradients_match_transformers_autograd(client):
    config, inv_freq = CASES["default"]
    torch.manual_seed(1)
    q = torch.randn(1, 4, 6, 64, requires_grad=True)
    k = torch.randn(1, 2, 6, 64, requires_grad=True)
    w_q, w_k = torch.randn(1, 4, 6, 64), torch.randn(1, 2, 6, 64)
    position_ids = torch.arange(6)[None] + 20
    q_out, k_out = RemoteRotaryEmbedding(client, config).rotate(q, k, position_ids)
    ((q_out * w_q).sum() + (k_out * w_k).sum()).backward()
    q_ref = q.detach().clone().requires_grad_()
    k_ref = k.detach().clone().requires_grad_()
    want_q, want_k = transformers_rope(q_ref, k_ref, position_ids, inv_freq())
    ((want_q * w_q).sum() + (want_k * w_k).sum()).backward()
    assert_matches(q.grad, q_ref.grad, torch.float32)
    assert_matches(k.grad, k_ref.grad, torch.float32)
    # Only q used: k gets no gradient, q's still flows.
    q.grad = None
    q_out, _ = RemoteRotaryEmbedding(client, config).rotate(q, k.detach(), position_ids)
    (q_out * w_q).sum().backward()
    assert_matches(q.grad, q_ref.grad, torch.float32)


def rotate_interleaved(x, cos, sin, unsqueeze_dim=1):
    """GLM's apply_rotary_pos_emb: cos/sin's first half repeated pairwise, pairs of neighbours."""
    cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)
    sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)
    pairs = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * cos + pairs * sin


def test_interleaved_layout_matches_glm_style_rotation(client):
    config = ropeserve.RopeConfig(head_dim=64, max_len=4096, theta=10000.0, layout="interleaved")
    torch.manual_seed(3)
    q, k = torch.randn(2, 4, 7, 64), torch.randn(2, 2, 7, 64)
    position_ids = torch.arange(7)[None].expand(2, 7) + 300
    q_out, k_out = RemoteRotaryEmbedding(client, config).rotate(q, k, position_ids)
    cos, sin = hf_cos_sin(q, position_ids, hf_default_inv_freq(10000.0, 64))
    assert_matches(q_out, rotate_interleaved(q, cos, sin), torch.float32)
    assert_matches(k_out, rotate_interleaved(k, cos, sin), torch.float32)


@pytest.mark.parametrize("case", list(CASES))
def test_cos_sin_are_the_rotary_modules(client, case):
    config, inv_freq = CASES[case]
    x = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    position_ids = torch.tensor([[0, 1, 2, 3, 4], [900, 901, 7, 3, 2000]])
    cos, sin = RemoteRotaryEmbedding(client, config)(x, position_ids)
    want_cos, want_sin = hf_cos_sin(x, position_ids, inv_freq())
    assert cos.shape == want_cos.shape == (2, 5, 64) and cos.dtype == torch.bfloat16
    assert_matches(cos, want_cos, torch.bfloat16)
    assert_matches(sin, want_sin, torch.bfloat16)


def test_float64_tensors_come_back_float64(client):
    config, inv_freq = CASES["default"]
    q = torch.randn(1, 2, 3, 64, dtype=torch.float64)
    q_out, _ = RemoteRotaryEmbedding(client, config).rotate(q, None, torch.tensor([[5, 6, 7]]))
    assert q_out.dtype == torch.float64
    want, _ = transformers_rope(q.float(), q.float(), torch.tensor([[5, 6, 7]]), inv_freq())
    assert_matches(q_out.float(), want, torch.float32)


def test_wrong_ranks_positions_and_devices_are_named(client):
    rope = RemoteRotaryEmbedding(client, CASES["default"][0])
    with pytest.raises(ValueError, match=r"q must be a \[B, H, S, D\] torch tensor"):
        rope.rotate(torch.randn(4, 5, 64))
    with pytest.raises(ValueError, match=r"position_ids has shape \[2, 4\]"):
        rope.rotate(torch.randn(3, 4, 5, 64), position_ids=torch.zeros(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="on device meta"):
        rope.rotate(torch.randn(1, 1, 2, 64, device="meta"))
    with pytest.raises(ValueError, match=r"call rope.rotate\(q, k, position_ids\)"):
        rope(torch.randn(1, 2, 3, 64), torch.randn(1, 2, 3, 64))


def test_repr_is_one_short_line(client):
    config = ropeserve.RopeConfig.from_hf({"model_type": "llama", "rope_theta": 500000.0,
                                           "hidden_size": 4096, "num_attention_heads": 32,
                                           "max_position_embeddings": 8192, "padding": "x" * 5000})
    text = repr(RemoteRotaryEmbedding(client, config))
    assert "\n" not in text and len(text) < 250, text
    assert "model_type llama" in text and "layout=half" in text and "max_len=8192" in text


def test_numpy_positions_for_the_module(client):
    config, inv_freq = CASES["default"]
    q = torch.randn(1, 2, 3, 64)
    q_out, _ = RemoteRotaryEmbedding(client, config).rotate(q, position_ids=np.array([[4, 9, 2]]))
    want, _ = transformers_rope(q, q, torch.tensor([[4, 9, 2]]), inv_freq())
    assert_matches(q_out, want, torch.float32)
