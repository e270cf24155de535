"""Independent float64 NumPy reference of the RoPE formulas (rope.proto, docs/design.md).

Frequencies for every scaling variant follow Hugging Face transformers'
modeling_rope_utils.py as rope.proto restates them; rotation and attention
follow the wire contract. Written from the formulas, sharing no code with
the client or the server.
"""

import math

import numpy as np


def plain_inv_freq(theta, rotary_dim):
    """inv[i] = theta^(-2i/r), i = 0 .. r/2-1."""
    return theta ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def _yarn_m(scale, k):
    return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0


def inv_freq_and_attention(kind, theta, rotary_dim, max_len=None, seq_len=None, **p):
    """(inv_freq [r/2], attention factor) of scaling `kind` ("none", "linear", "dynamic",
    "yarn", "llama3", "longrope", "proportional", "dynamic_alpha", "ntk", "deepseek_yarn") with
    parameters named as in rope.proto."""
    inv = plain_inv_freq(theta, rotary_dim)
    r = rotary_dim
    if kind == "none":
        return inv, 1.0
    if kind == "linear":
        return inv / p["factor"], 1.0
    if kind == "proportional":  # transformers' _compute_proportional_rope_parameters
        inv = inv / p.get("factor", 1.0)
        inv[p["rotated_pairs"]:] = 0.0
        return inv, 1.0
    if kind == "dynamic":
        orig, factor = p["original_max_position_embeddings"], p["factor"]
        if seq_len > orig:
            base = theta * (factor * seq_len / orig - (factor - 1)) ** (r / (r - 2))
            inv = plain_inv_freq(base, r)
        return inv, 1.0
    if kind == "yarn":
        factor, orig = p["factor"], p["original_max_position_embeddings"]
        beta_fast, beta_slow = p.get("beta_fast", 32.0), p.get("beta_slow", 1.0)

        def dim_of(rotations):
            return r * math.log(orig / (2 * math.pi * rotations)) / (2 * math.log(theta))

        low = max(math.floor(dim_of(beta_fast)), 0)
        high = min(math.ceil(dim_of(beta_slow)), r - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(r // 2) - low) / (high - low), 0.0, 1.0)
        inv = inv / factor * ramp + inv * (1 - ramp)
        attention = p.get("attention_factor")
        if attention is None:
            if p.get("mscale") and p.get("mscale_all_dim"):
                attention = _yarn_m(factor, p["mscale"]) / _yarn_m(factor, p["mscale_all_dim"])
            else:
                attention = _yarn_m(factor, 1.0)
        return inv, attention
    if kind == "llama3":
        factor, low, high = p.get("factor", 8.0), p.get("low_freq_factor", 1.0), p.get("high_freq_factor", 4.0)
        orig = p.get("original_max_position_embeddings", 8192)
        wavelength = 2 * math.pi / inv
        smooth = (orig / wavelength - low) / (high - low)
        out = np.where(wavelength > orig / low, inv / factor, inv)
        medium = (wavelength <= orig / low) & (wavelength >= orig / high)
        return np.where(medium, (1 - smooth) * inv / factor + smooth * inv, out), 1.0
    if kind == "longrope":
        orig = p["original_max_position_embeddings"]
        # rope.proto's two rules: with max_position_embeddings, transformers'
        # (long iff the sequence is longer than the original; the ratio from
        # max_position_embeddings); without, long iff max_len > original.
        mpe = p.get("max_position_embeddings")
        long_list = seq_len > orig if mpe else max_len > orig
        ext = np.array(p["long_factor"] if long_list else p["short_factor"], dtype=np.float64)
        attention = p.get("attention_factor")
        if attention is None:
            s = (mpe or max_len) / orig
            attention = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(orig))
        return inv / ext, attention
    if kind == "dynamic_alpha":  # HunYuan: a fixed base, whatever the length
        return plain_inv_freq(theta * p["alpha"] ** (r / (r - 2)), r), 1.0
    if kind == "ntk":  # vLLM's NTKScalingRotaryEmbedding
        factor, mixed_b = p["factor"], p.get("mixed_b")
        if mixed_b is None:
            return plain_inv_freq(theta * factor, r) / factor ** (2.0 / r), 1.0
        a = math.log(factor) / (r / 2) ** mixed_b
        return inv / np.exp(a * np.arange(1, r // 2 + 1, dtype=np.float64) ** mixed_b), 1.0
    if kind == "deepseek_yarn":  # vLLM's DeepseekScalingRotaryEmbedding
        factor, orig = p["factor"], p["original_max_position_embeddings"]
        beta_fast, beta_slow = p.get("beta_fast", 32.0), p.get("beta_slow", 1.0)

        def dim_of(rotations):
            return r * math.log(orig / (2 * math.pi * rotations)) / (2 * math.log(theta))

        low = max(math.floor(dim_of(beta_fast)), 0)
        high = min(math.ceil(dim_of(beta_slow)), r - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(r // 2) - low) / (high - low), 0.0, 1.0)
        mask = (1 - ramp) * p.get("extrapolation_factor", 1.0)
        inv = inv / factor * (1 - mask) + inv * mask
        attention = (_yarn_m(factor, p.get("mscale", 1.0)) / _yarn_m(factor, p.get("mscale_all_dim", 0.0))
                     * p.get("attn_factor", 1.0))
        return inv, attention
    raise ValueError(kind)


def rotate(x, positions, inv_freq, rotary_dim, half, inverse=False, attention=1.0):
    """x [B, S, H, D] rotated in float64; positions [S] or [B, S]."""
    x = np.asarray(x, dtype=np.float64)
    b, s = x.shape[0], x.shape[1]
    positions = np.broadcast_to(np.asarray(positions, dtype=np.float64).reshape(-1, s), (b, s))
    angle = positions[:, :, None, None] * inv_freq[None, None, None, :]  # [B, S, 1, r/2]
    cos, sin = attention * np.cos(angle), attention * np.sin(angle)
    if inverse:
        sin = -sin
    out = x.copy()
    if half:
        i0, i1 = np.arange(rotary_dim // 2), np.arange(rotary_dim // 2, rotary_dim)
    else:
        i0, i1 = np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)
    x0, x1 = x[..., i0], x[..., i1]
    out[..., i0] = x0 * cos - x1 * sin
    out[..., i1] = x0 * sin + x1 * cos
    return out


def attention_scores(q, k, v, q_start, k_start, inv_freq, half, causal, softmax, scale):
    """(scores or probabilities [B, Hq, Sq, Sk], output [B, Sq, Hq, Dv] or None) in float64."""
    sq, hq, d = q.shape[1], q.shape[2], q.shape[3]
    sk, hkv = k.shape[1], k.shape[2]
    q_pos, k_pos = q_start + np.arange(sq), k_start + np.arange(sk)
    qr = rotate(q, q_pos, inv_freq, d, half)
    kr = np.repeat(rotate(k, k_pos, inv_freq, d, half), hq // hkv, axis=2)  # query head h -> kv h/(Hq/Hkv)
    s = np.einsum("bihd,bjhd->bhij", qr, kr) * scale
    if causal:
        s = np.where(k_pos[None, :] > q_pos[:, None], -np.inf, s)
    if softmax:
        row_max = np.max(s, axis=-1, keepdims=True)
        e = np.where(np.isfinite(s), np.exp(s - np.where(np.isfinite(row_max), row_max, 0)), 0.0)
        total = e.sum(axis=-1, keepdims=True)
        s = np.divide(e, total, out=np.zeros_like(e), where=total > 0)  # fully masked row: 0
    out = None
    if v is not None:
        vr = np.repeat(np.asarray(v, dtype=np.float64), hq // hkv, axis=2)
        out = np.einsum("bhij,bjhd->bihd", s, vr)
    return s, out


# Storage rounding of each dtype: the relative size of half an ulp, used as the
# allowed relative error of a result rounded once from float32 arithmetic.
RELATIVE_ULP = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def assert_close(got, want, dtype_name, absolute=2e-6, what=""):
    """|got - want| <= ulp(dtype) * |want| + absolute, and the same non-finite entries."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, "%s: shape %s, want %s" % (what, got.shape, want.shape)
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite), "%s: non-finite entries differ" % what
    assert np.array_equal(got[~finite], want[~finite]), "%s: infinities differ" % what
    err = np.abs(got[finite] - want[finite])
    limit = RELATIVE_ULP[dtype_name] * np.abs(want[finite]) + absolute
    worst = np.argmax(err - limit) if err.size else 0
    assert np.all(err <= limit), "%s: |err| %.3g > %.3g at %d" % (what, err[worst], limit[worst], worst)
