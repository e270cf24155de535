#!/usr/bin/python3
"""Published models' config.json through a real ropeserve, against torch.

For every config in tests/fixtures/hf_configs (and each layer type where a
model has two), this test
  1. derives the rope from the JSON itself, in float64, following Hugging
     Face transformers' rules (RotaryEmbeddingConfigMixin.standardize_rope_params,
     the _compute_*_parameters functions of modeling_rope_utils.py, and the
     model classes' own defaults): an implementation written here, sharing
     nothing with the server;
  2. asks the server (RopeConfig.hf_config_json) for ResolveConfig and a
     GetTable slice, and compares inverse frequencies, attention factor and
     cos/sin rows with (1);
  3. rotates q and k through the server and compares with a torch float64
     re-implementation of transformers' apply functions: rotate_half and
     apply_rotary_pos_emb (partial rotary as Phi-3 splits it), Llama 4's
     complex-number form for the interleaved layout, Qwen2-VL's
     apply_multimodal_rotary_pos_emb (section split) and Qwen3-VL's
     apply_interleaved_mrope, with M-RoPE positions [3, B, S];
  4. runs `ropectl resolve --hf_config=...` on one of them, and on every one
     without --layout and --max_len: the layout transformers uses for the
     model (the third column of MODELS, written here from transformers'
     modeling code) and max_position_embeddings, as RopeConfig.from_hf
     derives them too (one rule in every client);
  5. for the variants the serving engines ship (HunYuan's dynamic alpha,
     DeepSeek-V2/V3 and Kimi K2's MLA heads, Llama 4 Scout's NoPE layers
     and their temperature tuning, Ernie 4.5-VL's 3-D RoPE, DeepSeek-V4's
     rope groups, Pythia's rotary_pct), derives each from the JSON in
     float64 as the engine that defines it writes it (transformers'
     modeling code, else vLLM's rotary_embedding/), and checks
     ResolveConfig, Rotate (the rope part and the whole MLA head; a NoPE
     layer's identity) and AttentionScores (the temperature tuning)
     through the server, float8 outputs included.

ropeserve is started with tests/support/python/ropeserve_process.py; the
rope.v1 stubs are the Python client package's (ropeserve.proto).
Exit status: 0 pass, 1 fail, 77 skipped (no torch / numpy / grpcio).
"""

import argparse
import json
import math
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    import grpc
except ImportError as e:  # pragma: no cover - depends on the machine
    print("SKIP: %s is not available to %s" % (e.name, sys.executable))
    sys.exit(77)

TIMEOUT_S = 60


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


# ---- transformers' config.json -> rope, in float64 -----------------------------
# Only what transformers itself does; every default named here is one of its
# config classes' (Gemma3TextConfig: head_dim 256, max_position_embeddings
# 131072, default_theta {"global": 1e6, "local": 1e4}).

GEMMA3_TEXT_DEFAULTS = {"head_dim": 256, "max_position_embeddings": 131072,
                        "rope_theta": 1e6, "rope_local_base_freq": 1e4}


def get(d, key, default=None):
    """dict.get treating an explicit null as absent, as `x or default` does."""
    value = d.get(key)
    return default if value is None else value


def standardize(config, layer_type):
    """(text config, rope parameter dict for layer_type, model defaults)."""
    cfg = config.get("text_config") or config
    model_type = cfg.get("model_type") or config.get("model_type")
    if model_type == "gemma3":
        model_type = "gemma3_text"
    defaults = GEMMA3_TEXT_DEFAULTS if model_type == "gemma3_text" else {}
    rope_scaling = cfg.get("rope_scaling")
    params = dict(rope_scaling or cfg.get("rope_parameters") or {})
    layer_types = cfg.get("layer_types")
    if layer_types and params and set(params).issubset(layer_types):
        # Case 2 of standardize_rope_params: one dict per layer type.
        params = dict(params[layer_type])
        params.setdefault("rope_theta", cfg.get("rope_theta"))
        if cfg.get("partial_rotary_factor") is not None:
            params["partial_rotary_factor"] = cfg["partial_rotary_factor"]
        params.setdefault("rope_type", params.get("type", "default"))
        if params["rope_type"] in ("llama3", "yarn", "longrope"):
            params.setdefault("original_max_position_embeddings",
                              get(cfg, "max_position_embeddings"))
        return cfg, params, defaults
    if model_type == "gemma3_text":
        # Gemma3TextConfig.convert_rope_params_to_dict.
        if layer_type == "sliding_attention":
            params = {"rope_type": "default",
                      "rope_theta": get(cfg, "rope_local_base_freq",
                                        defaults["rope_local_base_freq"])}
        else:
            params = {"rope_type": "default", **params}
            params.setdefault("rope_theta", get(cfg, "rope_theta", defaults["rope_theta"]))
    # Case 1: one dict for every layer.
    params.setdefault("rope_type", params.get("type", "default"))
    params.setdefault("rope_theta", cfg.get("rope_theta"))
    if cfg.get("partial_rotary_factor") is not None:
        params["partial_rotary_factor"] = cfg["partial_rotary_factor"]
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        if "original_max_position_embeddings" in cfg:
            params["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
        else:
            params.setdefault("original_max_position_embeddings",
                              get(cfg, "max_position_embeddings",
                                  defaults.get("max_position_embeddings")))
    if params["rope_type"] == "mrope":  # Qwen2-VL's legacy name
        params["rope_type"] = "default"
    return cfg, params, defaults


def head_dim_of(cfg, defaults):
    if cfg.get("qk_rope_head_dim") is not None:  # DeepseekV3Config: head_dim = qk_rope_head_dim
        return cfg["qk_rope_head_dim"]
    if cfg.get("head_dim") is not None:
        return cfg["head_dim"]
    if "head_dim" in defaults:
        return defaults["head_dim"]
    return cfg["hidden_size"] // cfg["num_attention_heads"]


def rope_of(config, layer_type, seq_len=None):
    """(dim, inv_freq float64 [dim/2], attention_factor, mrope section, interleaved)."""
    cfg, p, defaults = standardize(config, layer_type)
    base = float(p["rope_theta"])
    dim = int(head_dim_of(cfg, defaults) * p.get("partial_rotary_factor", 1.0))
    max_pos = get(cfg, "max_position_embeddings", defaults.get("max_position_embeddings"))
    exponents = np.arange(0, dim, 2, dtype=np.float64) / dim
    inv = 1.0 / base ** exponents
    attention = 1.0
    kind = p["rope_type"]
    if kind == "linear":
        inv = inv / p["factor"]
    elif kind == "dynamic":
        seq = max(seq_len or max_pos, max_pos)
        base = base * ((p["factor"] * seq / max_pos) - (p["factor"] - 1)) ** (dim / (dim - 2))
        inv = 1.0 / base ** exponents
    elif kind == "yarn":
        original = p["original_max_position_embeddings"]
        factor = p.get("factor")
        if factor is None:
            factor = max_pos / original

        def get_mscale(scale, mscale=1):
            return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

        attention = p.get("attention_factor")
        if attention is None:
            if p.get("mscale") and p.get("mscale_all_dim"):
                attention = get_mscale(factor, p["mscale"]) / get_mscale(factor, p["mscale_all_dim"])
            else:
                attention = get_mscale(factor)
        beta_fast = p.get("beta_fast") or 32
        beta_slow = p.get("beta_slow") or 1

        def correction_dim(rotations):
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if p.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        inv = (inv / factor) * (1 - extrapolation) + inv * extrapolation
    elif kind == "llama3":
        old = p["original_max_position_embeddings"]
        low_wl = old / p["low_freq_factor"]
        high_wl = old / p["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        llama = np.where(wavelen > low_wl, inv / p["factor"], inv)
        # Equal band factors (Llama 4 Scout) make smooth 0/0 where unused.
        with np.errstate(divide="ignore", invalid="ignore"):
            smooth = (old / wavelen - p["low_freq_factor"]) / (
                p["high_freq_factor"] - p["low_freq_factor"])
            smoothed = (1 - smooth) * llama / p["factor"] + smooth * llama
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        inv = np.where(medium, smoothed, llama)
    elif kind == "longrope":
        original = p["original_max_position_embeddings"]
        factor = p.get("factor")
        if factor is None:
            factor = max_pos / original
        attention = p.get("attention_factor")
        if attention is None:
            attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
        ext = p["long_factor"] if seq_len and seq_len > original else p["short_factor"]
        inv = 1.0 / (np.asarray(ext, dtype=np.float64) * base ** exponents)
    elif kind != "default":
        raise Failure("the reference does not know rope_type %r" % kind)
    return dim, inv, float(attention), p.get("mrope_section"), bool(p.get("mrope_interleaved"))


# ---- transformers' apply functions, in torch float64 -----------------------------

def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    """x [B,S,H,D]; cos/sin [B,S,rot] (the duplicated emb); partial rotary as Phi-3."""
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    return torch.cat(((x_rot * cos) + (rotate_half(x_rot) * sin), x_pass), dim=-1)


def apply_rotary_emb_complex(x, freqs):
    """Llama 4's form: pairs (x[2i], x[2i+1]) as complex numbers times e^(i angle)."""
    rot = freqs.shape[-1] * 2
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    xc = torch.view_as_complex(x_rot.reshape(*x_rot.shape[:-1], -1, 2).contiguous())
    cis = torch.polar(torch.ones_like(freqs), freqs).unsqueeze(2)
    out = torch.view_as_real(xc * cis).flatten(3)
    return torch.cat((out, x_pass), dim=-1)


def freqs_for(inv, positions, section, interleaved):
    """Angles [B,S,rot/2] for position ids [B,S], or [3,B,S] with M-RoPE."""
    inv_t = torch.tensor(inv, dtype=torch.float64)
    if positions.dim() == 2:
        return positions.to(torch.float64)[..., None] * inv_t
    freqs = positions.to(torch.float64)[..., None] * inv_t  # [3, B, S, rot/2]
    if interleaved:  # Qwen3-VL apply_interleaved_mrope
        out = freqs[0].clone()
        for axis, offset in ((1, 1), (2, 2)):
            length = section[axis] * 3
            out[..., offset:length:3] = freqs[axis, ..., offset:length:3]
        return out
    # Qwen2-VL apply_multimodal_rotary_pos_emb on the duplicated embedding,
    # then the first half (the second half mirrors it).
    emb = torch.cat((freqs, freqs), dim=-1)
    chunks = emb.split(list(section) * 2, dim=-1)
    emb = torch.cat([m[i % 3] for i, m in enumerate(chunks)], dim=-1)
    return emb[..., : inv_t.shape[0]]


def reference_rotate(x, inv, attention, positions, section, interleaved, layout_half):
    freqs = freqs_for(inv, positions, section, interleaved)
    x = torch.tensor(x, dtype=torch.float64)
    if layout_half:
        emb = torch.cat((freqs, freqs), dim=-1)
        return apply_rotary_pos_emb(x, emb.cos() * attention, emb.sin() * attention).numpy()
    # The attention factor scales cos and sin alike: a real factor on the
    # complex product, on the rotated features only.
    rotated = apply_rotary_emb_complex(x, freqs)
    rotated[..., : freqs.shape[-1] * 2] *= attention
    return rotated.numpy()


# ---- the server -------------------------------------------------------------------

def bf16_round(a):
    """float32 -> bfloat16 bits (round to nearest even) as uint16."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


class Server:
    def __init__(self, pb2, pb2_grpc, address):
        self.pb2 = pb2
        self.channel = grpc.insecure_channel(address)
        self.stub = pb2_grpc.RopeServiceStub(self.channel)

    def config(self, json_text, layer_type, max_len, head_dim=0, layout_half=True):
        return self.pb2.RopeConfig(hf_config_json=json_text, hf_layer_type=layer_type,
                                   max_len=max_len, head_dim=head_dim,
                                   layout=self.pb2.HALF if layout_half else self.pb2.INTERLEAVED)

    def tensor(self, values, dtype):
        if dtype == "bfloat16":
            return self.pb2.Tensor(dtype=self.pb2.BFLOAT16, shape=list(values.shape),
                                   data=bf16_round(values).tobytes())
        return self.pb2.Tensor(dtype=self.pb2.FLOAT32, shape=list(values.shape),
                               data=np.asarray(values, dtype=np.float32).tobytes())

    @staticmethod
    def decode(tensor, shape):
        if tensor.dtype == 3:  # BFLOAT16
            return bf16_to_f32(np.frombuffer(tensor.data, dtype=np.uint16)).reshape(shape)
        return np.frombuffer(tensor.data, dtype=np.float32).reshape(shape)


def check_model(server, name, config_text, layer_type, rng, layout_half):
    config = json.loads(config_text)
    what = "%s (%s)" % (name, layer_type)
    max_len = 16384
    dim, inv, attention, section, interleaved = rope_of(config, layer_type)

    # ResolveConfig: what the JSON becomes, and the table of a request at 0.
    resolved = server.stub.ResolveConfig(
        server.config(config_text, layer_type, max_len, layout_half=layout_half),
        timeout=TIMEOUT_S)
    got_inv = np.array(resolved.inv_freq)
    check(got_inv.shape == inv.shape, "%s: inv_freq has %d values, want %d"
          % (what, got_inv.size, inv.size))
    err = np.max(np.abs(got_inv - inv) / inv)
    check(err <= 1e-13, "%s: inv_freq off by %.3g (relative)" % (what, err))
    check(abs(resolved.attention_factor - attention) <= 1e-15 * attention,
          "%s: attention factor %r, want %r" % (what, resolved.attention_factor, attention))
    head_dim = resolved.config.head_dim
    check(resolved.config.rotary_dim == dim, "%s: rotary_dim %d, want %d"
          % (what, resolved.config.rotary_dim, dim))
    if section:
        check(list(resolved.config.mrope.section) == list(section)
              and resolved.config.mrope.interleaved == interleaved,
              "%s: mrope %s, want %s" % (what, resolved.config.mrope, section))

    # GetTable rows [start, start + count): the reference at that length
    # (LongRoPE picks its list by start + count).
    for start, count in ((0, 64), (4000, 200)):
        inv_at = rope_of(config, layer_type, seq_len=start + count)[1]
        att_at = rope_of(config, layer_type, seq_len=start + count)[2]
        table = server.stub.GetTable(
            server.pb2.GetTableRequest(config=server.config(config_text, layer_type, max_len),
                                       start=start, count=count), timeout=TIMEOUT_S)
        cos = Server.decode(table.cos, (count, dim // 2)).astype(np.float64)
        sin = Server.decode(table.sin, (count, dim // 2)).astype(np.float64)
        angles = np.arange(start, start + count, dtype=np.float64)[:, None] * inv_at
        tol = 1.2e-7 * att_at
        for got, want, label in ((cos, att_at * np.cos(angles), "cos"),
                                 (sin, att_at * np.sin(angles), "sin")):
            e = np.max(np.abs(got - want))
            check(e <= tol, "%s: GetTable %s rows %d.. off by %.3g" % (what, label, start, e))

    # Rotate: q [B,S,Hq,D] and k [B,S,Hkv,D], float32 and bfloat16.
    batch, seq, hq, hkv = 2, 5, 4, 2
    if section:
        # Two text tokens, then a 1 x 3 grid of image patches, per row
        # (t, h, w differ on the patches), in the shape of get_rope_index's.
        text = [[0, 1], [7, 8]]
        positions = np.zeros((3, batch, seq), dtype=np.int64)
        for b in range(batch):
            for axis in range(3):
                positions[axis, b, :2] = text[b]
            positions[0, b, 2:] = text[b][1] + 1
            positions[1, b, 2:] = text[b][1] + 1
            positions[2, b, 2:] = text[b][1] + 1 + np.arange(3)
        position_sets = [positions, positions + 5000]
    else:
        base_positions = np.array([[3, 4, 5, 6, 7], [100, 101, 4094, 4095, 4096]], dtype=np.int64)
        # Short prompts (under 4096) and one reaching past it: LongRoPE's
        # list changes between the two.
        position_sets = [base_positions[:1].repeat(2, axis=0), base_positions]
    for dtype in ("float32", "bfloat16"):
        for positions in position_sets:
            q = rng.uniform(-1, 1, size=(batch, seq, hq, head_dim)).astype(np.float32)
            k = rng.uniform(-1, 1, size=(batch, seq, hkv, head_dim)).astype(np.float32)
            if dtype == "bfloat16":
                q, k = bf16_to_f32(bf16_round(q)), bf16_to_f32(bf16_round(k))
            request = server.pb2.RotateRequest(
                config=server.config(config_text, layer_type, max_len, head_dim=head_dim,
                                     layout_half=layout_half),
                q=server.tensor(q, dtype), k=server.tensor(k, dtype),
                positions=[int(p) for p in positions.reshape(-1)])
            reply = server.stub.Rotate(request, timeout=TIMEOUT_S)
            seq_len = int(positions.max()) + 1  # transformers: max(position_ids) + 1
            _, inv_at, att_at, _, _ = rope_of(config, layer_type, seq_len=seq_len)
            pos_t = torch.tensor(positions)
            for got_t, x, label in ((reply.q, q, "q"), (reply.k, k, "k")):
                got = Server.decode(got_t, x.shape).astype(np.float64)
                want = reference_rotate(x, inv_at, att_at, pos_t, section, interleaved,
                                        layout_half)
                if dtype == "float32":
                    tol = 4e-6 * (1 + np.abs(want))
                else:  # one bfloat16 rounding of the float32 result
                    tol = 2.0 ** -8 * np.abs(want) + 4e-6
                bad = np.abs(got - want) > tol
                check(not bad.any(), "%s: Rotate %s %s at positions max %d: %d values off, worst "
                      "%.3g" % (what, dtype, label, seq_len - 1, int(bad.sum()),
                                float(np.max(np.abs(got - want)))))
    print("ok  %-34s dim %3d  attention %.6f%s" % (what, dim, attention,
                                                    "  mrope %s" % (section,) if section else ""))


# Models and the layer types and pairing they are checked with: HALF
# (rotate_half) for the transformers models that use it, INTERLEAVED
# (complex pairs) for Llama 4, as transformers' Llama4 applies it.
MODELS = [
    ("Llama-3.1-8B-Instruct", ["full_attention"], True),
    ("Llama-4-Scout-17B-16E-Instruct", ["full_attention"], False),
    ("gemma-3-12b-it", ["full_attention", "sliding_attention"], True),
    ("DeepSeek-V3", ["full_attention"], False),
    ("Phi-4-mini-instruct", ["full_attention"], True),
    ("gpt-oss-20b", ["full_attention", "sliding_attention"], True),
    ("Qwen3-8B", ["full_attention"], True),
    ("Qwen3-8B-yarn", ["full_attention"], True),
    ("Qwen2-VL-7B-Instruct", ["full_attention"], True),
    ("Qwen2.5-VL-7B-Instruct", ["full_attention"], True),
    ("Qwen3-VL-8B-Instruct", ["full_attention"], True),
]

# ---- The serving engines' variants, in float64 ------------------------------------------
# Each derivation follows the code of the engine that defines the variant:
# transformers' modeling code where it has one, vLLM's rotary_embedding/
# otherwise. Nothing here is shared with the server or with the code above.

def yarn_inv(base, dim, factor, original, beta_fast, beta_slow):
    """transformers' _compute_yarn_parameters (truncate), inverse frequencies."""
    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))
    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    return (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


def yarn_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def variant_rope(name, config, selector):
    """(dim, inv_freq, attention, rope_part_width, whole_width, layout_interleaved, extra)."""
    cfg = config.get("text_config") or config
    if name == "Hunyuan-7B-Instruct":
        # HunYuanDenseV1RotaryEmbedding: base * alpha ** (head_dim / (head_dim - 2)).
        dim = cfg["head_dim"]
        alpha = cfg["rope_scaling"]["alpha"]
        base = cfg["rope_theta"] * alpha ** (dim / (dim - 2))
        inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        return dim, inv, 1.0, dim, 0, False, {}
    if name in ("DeepSeek-V2-Lite-Chat", "Kimi-K2-Instruct", "DeepSeek-V3"):
        # DeepseekV3Config: head_dim = qk_rope_head_dim; yarn with mscales.
        p = cfg.get("rope_scaling") or cfg.get("rope_parameters")
        base = p.get("rope_theta", cfg.get("rope_theta"))
        dim = cfg["qk_rope_head_dim"]
        inv = yarn_inv(base, dim, p["factor"], p["original_max_position_embeddings"],
                       p.get("beta_fast") or 32, p.get("beta_slow") or 1)
        if p.get("mscale") and p.get("mscale_all_dim"):
            attention = yarn_mscale(p["factor"], p["mscale"]) / yarn_mscale(p["factor"],
                                                                            p["mscale_all_dim"])
        else:
            attention = yarn_mscale(p["factor"])
        return dim, inv, attention, dim, dim + cfg["qk_nope_head_dim"], True, {}
    if name == "Llama-4-Scout-17B-16E-Instruct":
        # Llama4TextAttention: use_rope = no_rope_layers[layer_idx].
        index = selector["index"]
        if not cfg["no_rope_layers"][index]:
            return cfg["head_dim"], None, 1.0, cfg["head_dim"], 0, True, {
                "temperature": (cfg["floor_scale"], cfg["attn_scale"])}
        dim, inv, attention, _, _ = rope_of(config, "full_attention")
        return dim, inv, attention, dim, 0, True, {}
    if name == "ERNIE-4.5-VL-28B-A3B-PT":
        # vLLM's Ernie4_5_VLMoeAttention: t = freq_allocation, h = w = (d/2 - t) // 2;
        # transformers' Ernie4_5_VLMoeTextRotaryEmbedding on [h, w, t].
        dim = cfg["hidden_size"] // cfg["num_attention_heads"]
        t = cfg["freq_allocation"]
        h = (dim // 2 - t) // 2
        inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        return dim, inv, 1.0, dim, 0, True, {"ernie": (h, h, t)}
    if name == "DeepSeek-V4-Flash":
        # DeepseekV4Config: main = rope_theta, plain; compress = compress_rope_theta
        # with the yarn of rope_scaling and attention_factor 1.0. Layers by
        # compress_ratios (0: sliding_attention, main).
        group = selector.get("layer_type")
        if group is None:
            group = "main" if cfg["compress_ratios"][selector["index"]] == 0 else "compress"
        dim = cfg["qk_rope_head_dim"]
        if group == "main":
            inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        else:
            p = cfg["rope_scaling"]
            inv = yarn_inv(cfg["compress_rope_theta"], dim, p["factor"],
                           p["original_max_position_embeddings"], p["beta_fast"], p["beta_slow"])
        return dim, inv, 1.0, dim, cfg["head_dim"], True, {}
    if name == "pythia-2.8b":
        # GPTNeoXConfig: rotary_pct -> partial_rotary_factor, rotary_emb_base -> rope_theta.
        head = cfg["hidden_size"] // cfg["num_attention_heads"]
        dim = int(head * cfg["rotary_pct"])
        inv = 1.0 / cfg["rotary_emb_base"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        return dim, inv, 1.0, head, 0, False, {}
    raise Failure("no variant reference for %s" % name)


def rotate_window(x, angles, attention, offset, dim, interleaved):
    """Rotates features [offset, offset + dim) of x [B,S,H,W] in float64 by angles [B,S,dim/2]."""
    out = np.array(x, dtype=np.float64)
    seg = out[..., offset:offset + dim].copy()
    if interleaved:
        x0, x1 = seg[..., 0::2], seg[..., 1::2]
    else:
        x0, x1 = seg[..., : dim // 2], seg[..., dim // 2:]
    c = (np.cos(angles) * attention)[:, :, None, :]
    s = (np.sin(angles) * attention)[:, :, None, :]
    y0, y1 = x0 * c - x1 * s, x0 * s + x1 * c
    if interleaved:
        seg[..., 0::2], seg[..., 1::2] = y0, y1
    else:
        seg[..., : dim // 2], seg[..., dim // 2:] = y0, y1
    out[..., offset:offset + dim] = seg
    return out


def transformers_deepseek_interleave(x, angles, attention):
    """transformers' DeepSeek-V3 apply_rotary_pos_emb_interleave on x [B,S,H,d]: the
    pairs de-interleaved, then rotate_half; its output stays in that order."""
    x = torch.tensor(x, dtype=torch.float64).permute(0, 2, 1, 3)  # [B,H,S,d]
    b, h, s, d = x.shape
    x = x.reshape(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    emb = torch.cat((torch.tensor(angles), torch.tensor(angles)), dim=-1)[:, None]
    cos, sin = emb.cos() * attention, emb.sin() * attention
    out = x * cos + rotate_half(x) * sin
    return out.permute(0, 2, 1, 3).numpy()


def ernie_reference(x, inv, positions, sections):
    """transformers' Ernie 4.5-VL: pre-rotated inv_freq, per-axis freqs split [h, w, t]
    (chunk j from axis (j + 1) % 3 of (t, h, w)), h and w stacked, repeat_interleave(2),
    then x * cos + rotate_half_text(x) * sin."""
    h, w, t = sections
    inv_t = torch.tensor(inv, dtype=torch.float64)
    hw = h + w
    inv3d = torch.empty_like(inv_t)
    inv3d[:hw] = torch.cat([inv_t[:-t][0::2], inv_t[:-t][1::2]])
    inv3d[-t:] = inv_t[-t:]
    freqs = torch.tensor(positions, dtype=torch.float64)[..., None] * inv3d  # [3,B,S,half]
    parts = freqs.split([h, w, t], dim=-1)
    f_h, f_w, f_t = (m[(i + 1) % 3] for i, m in enumerate(parts))
    hwt = torch.cat([torch.stack([f_h, f_w], dim=-1).flatten(-2), f_t], dim=-1)
    cos = hwt.cos().repeat_interleave(2, dim=-1)[:, :, None, :]
    sin = hwt.sin().repeat_interleave(2, dim=-1)[:, :, None, :]
    xt = torch.tensor(x, dtype=torch.float64)
    rot = torch.stack((-xt[..., 1::2], xt[..., 0::2]), dim=-1).flatten(-2)
    return (xt * cos + rot * sin).numpy()


def float8_e4m3(values):
    """Nearest E4M3FN code (ties to even), saturating at 448, NaN 0x7f: by search."""
    codes = np.arange(128, dtype=np.int64)
    exp, mant = (codes >> 3) & 15, codes & 7
    grid = np.where(exp == 0, mant * 2.0 ** -9, (1 + mant / 8.0) * 2.0 ** (exp - 7))
    grid[127] = np.inf  # 0x7f is NaN
    out = []
    for v in np.asarray(values, dtype=np.float64).ravel():
        if np.isnan(v):
            out.append(0x7f)
            continue
        a = abs(v)
        if a > 464:
            code = 0x7e
        else:
            d = np.abs(grid - a)
            best = np.flatnonzero(d == d.min())
            code = int(best[0] if best[0] % 2 == 0 or len(best) == 1 else best[1])
        out.append(code | (0x80 if np.signbit(v) else 0))
    return np.array(out, dtype=np.uint8)


def check_variant(server, name, config_text, selector, rng):
    config = json.loads(config_text)
    what = "%s %s" % (name, selector)
    dim, inv, attention, part, whole, interleaved, extra = variant_rope(name, config, selector)
    base = server.pb2.RopeConfig(hf_config_json=config_text, max_len=1 << 17,
                                 hf_layer_type=selector.get("layer_type", ""),
                                 layout=server.pb2.INTERLEAVED if interleaved else server.pb2.HALF)
    if "index" in selector:
        base.hf_layer_index = selector["index"]
    resolved = server.stub.ResolveConfig(base, timeout=TIMEOUT_S)
    want_layout = server.pb2.INTERLEAVED if interleaved else server.pb2.HALF
    check(resolved.hf_layout == want_layout, "%s: hf_layout %d, want %d"
          % (what, resolved.hf_layout, want_layout))
    check(resolved.whole_head_dim == (whole if whole != part else 0),
          "%s: whole_head_dim %d, want %d" % (what, resolved.whole_head_dim, whole))
    if inv is None:
        check(resolved.no_rope and not resolved.inv_freq, "%s: not resolved as NoPE" % what)
    else:
        got = np.array(resolved.inv_freq)
        check(got.shape == inv.shape, "%s: %d inverse frequencies, want %d"
              % (what, got.size, inv.size))
        err = np.max(np.abs(got - inv) / inv)
        check(err <= 1e-13, "%s: inv_freq off by %.3g (relative)" % (what, err))
        check(abs(resolved.attention_factor - attention) <= 1e-15 * attention,
              "%s: attention factor %r, want %r" % (what, resolved.attention_factor, attention))

    batch, seq, hq, hkv = 2, 3, 3, 2  # any head counts rotate
    positions = np.array([[5, 900, 70000], [1, 2, 131071]], dtype=np.int64)
    for width in sorted({part, whole} - {0}):
        offset = width - dim if width == whole and whole != part else 0
        request_config = server.pb2.RopeConfig()
        request_config.CopyFrom(base)
        q = rng.uniform(-1, 1, size=(batch, seq, hq, width)).astype(np.float32)
        k = rng.uniform(-1, 1, size=(batch, seq, hkv, width)).astype(np.float32)
        if "ernie" in extra:
            # t, h, w: image-patch-like positions, each axis its own.
            mpos = np.stack([positions, np.maximum(positions - 3, 0), np.maximum(positions - 7, 0)])
            flat = [int(p) for p in mpos.reshape(-1)]
        else:
            flat = [int(p) for p in positions.reshape(-1)]
        request = server.pb2.RotateRequest(config=request_config, q=server.tensor(q, "float32"),
                                           k=server.tensor(k, "float32"), positions=flat)
        reply = server.stub.Rotate(request, timeout=TIMEOUT_S)
        for got_t, x, label in ((reply.q, q, "q"), (reply.k, k, "k")):
            got = Server.decode(got_t, x.shape).astype(np.float64)
            if inv is None:
                want = x.astype(np.float64)
                check(np.array_equal(got, want), "%s: a NoPE layer's Rotate changed %s"
                      % (what, label))
                continue
            if "ernie" in extra:
                want = ernie_reference(x, inv, mpos, extra["ernie"])
            else:
                angles = positions.astype(np.float64)[..., None] * inv
                want = rotate_window(x, angles, attention, offset, dim, interleaved)
            tol = 4e-6 * (1 + np.abs(want))
            bad = np.abs(got - want) > tol
            check(not bad.any(), "%s: Rotate width %d %s: %d values off, worst %.3g"
                  % (what, width, label, int(bad.sum()), float(np.max(np.abs(got - want)))))
            if name.startswith(("DeepSeek-V2", "DeepSeek-V3", "Kimi")) and width == part:
                # The pairs are transformers' (rope_interleave): its output is the
                # same values, de-interleaved.
                angles = positions.astype(np.float64)[..., None] * inv
                tf = transformers_deepseek_interleave(x, angles, attention)
                perm = list(range(0, dim, 2)) + list(range(1, dim, 2))
                check(np.max(np.abs(got[..., perm] - tf)) <= 4e-6 * (1 + np.max(np.abs(tf))),
                      "%s: differs from transformers' apply_rotary_pos_emb_interleave" % what)
        if width == part and inv is not None and "ernie" not in extra:
            # Float8 output: the same rotation, rounded to E4M3FN after the scale.
            request.output_dtype = server.pb2.FLOAT8_E4M3FN
            request.output_scale = 64.0
            reply8 = server.stub.Rotate(request, timeout=TIMEOUT_S)
            check(reply8.q.dtype == server.pb2.FLOAT8_E4M3FN and len(reply8.q.data) == q.size,
                  "%s: float8 reply of %d bytes, want %d" % (what, len(reply8.q.data), q.size))
            rotated = Server.decode(reply.q, q.shape).astype(np.float32)
            want8 = float8_e4m3(rotated * np.float32(64.0))
            got8 = np.frombuffer(reply8.q.data, dtype=np.uint8)
            check(np.array_equal(got8, want8), "%s: %d float8 codes differ"
                  % (what, int(np.sum(got8 != want8))))
    if "temperature" in extra:
        floor_scale, attn_scale = extra["temperature"]
        sq, sk, d = 3, 4, dim
        q = rng.uniform(-1, 1, size=(1, sq, 2, d)).astype(np.float32)
        k = rng.uniform(-1, 1, size=(1, sk, 2, d)).astype(np.float32)
        q_start = 20000
        request = server.pb2.AttentionScoresRequest(
            config=base, q=server.tensor(q, "float32"), k=server.tensor(k, "float32"),
            q_start_pos=q_start, k_start_pos=q_start)
        reply = server.stub.AttentionScores(request, timeout=TIMEOUT_S)
        scores = np.frombuffer(reply.scores.data, dtype=np.float32).reshape(1, 2, sq, sk)
        temps = np.log(np.floor((q_start + np.arange(sq) + 1.0) / floor_scale) + 1.0) * attn_scale + 1.0
        qs = (q * temps.astype(np.float32)[None, :, None, None]).astype(np.float64)
        want = np.einsum("bihd,bjhd->bhij", qs, k.astype(np.float64)) / math.sqrt(d)
        err = np.max(np.abs(scores - want) / (1 + np.abs(want)))
        check(err <= 2e-6, "%s: temperature-tuned scores off by %.3g" % (what, err))
    print("ok  %-48s dim %3d%s" % (what, dim, "  (NoPE)" if inv is None else ""))


VARIANTS = [
    ("Hunyuan-7B-Instruct", [{}]),
    ("DeepSeek-V2-Lite-Chat", [{}]),
    ("DeepSeek-V3", [{}]),
    ("Kimi-K2-Instruct", [{}]),
    ("Llama-4-Scout-17B-16E-Instruct", [{"index": 3}, {"index": 0}]),
    ("ERNIE-4.5-VL-28B-A3B-PT", [{}]),
    ("DeepSeek-V4-Flash", [{"layer_type": "main"}, {"index": 2}]),
    ("pythia-2.8b", [{}]),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--ropectl", required=True)
    parser.add_argument("--fixtures", required=True, help="tests/fixtures/hf_configs")
    args = parser.parse_args()

    # Both on PYTHONPATH (rope_py_test ... WITH_CLIENT_PACKAGE): the server
    # launcher from tests/support/python and the rope.v1 stubs that the
    # Python client package (client/python) generates.
    from ropeserve_process import RopeServe  # pylint: disable=import-outside-toplevel
    from ropeserve.proto import rope_pb2, rope_pb2_grpc  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(20260413)
    failures = 0
    with RopeServe(args.ropeserve, ["--backend=cpu", "--cpu_threads=2", "--work_threads=2"]) as rs:
        server = Server(rope_pb2, rope_pb2_grpc, rs.address)
        for name, layer_types, layout_half in MODELS:
            with open(os.path.join(args.fixtures, name + ".json"), encoding="utf-8") as f:
                text = f.read()
            for layer_type in layer_types:
                try:
                    check_model(server, name, text, layer_type, rng, layout_half)
                except (Failure, grpc.RpcError) as e:
                    failures += 1
                    print("FAIL %s (%s): %s" % (name, layer_type, e))
        for name, selectors in VARIANTS:
            with open(os.path.join(args.fixtures, name + ".json"), encoding="utf-8") as f:
                text = f.read()
            for selector in selectors:
                try:
                    check_variant(server, name, text, selector, rng)
                except (Failure, grpc.RpcError) as e:
                    failures += 1
                    print("FAIL %s" % e if isinstance(e, Failure)
                          else "FAIL %s %s: %s" % (name, selector, e))
        # The CLI: ropectl resolve on a published config.
        path = os.path.join(args.fixtures, "Phi-4-mini-instruct.json")
        run = subprocess.run([args.ropectl, "resolve", "--target=" + rs.address,
                              "--hf_config=" + path, "--max_len=131072"],
                             capture_output=True, text=True, timeout=TIMEOUT_S)
        want = ["head_dim=128 rotary_dim=96 max_len=131072",
                "--rope_scaling=longrope", "--max_position_embeddings=131072",
                "attention_factor=1.19023"]
        missing = [w for w in want if w not in run.stdout]
        if run.returncode != 0 or missing:
            failures += 1
            print("FAIL ropectl resolve: exit %d, missing %s\n%s%s"
                  % (run.returncode, missing, run.stdout, run.stderr))
        else:
            print("ok  ropectl resolve --hf_config=Phi-4-mini-instruct.json")
        # One rule for config.json defaults: ropectl (the C++ table) and the
        # Python package's from_hf, against this test's own column.
        import ropeserve  # pylint: disable=import-outside-toplevel
        for name, _, layout_half in MODELS:
            path = os.path.join(args.fixtures, name + ".json")
            with open(path, encoding="utf-8") as f:
                max_position = json.load(f)
            # Gemma 3's config.json has none: transformers' Gemma3TextConfig default.
            max_position = max_position.get("max_position_embeddings") or \
                max_position.get("text_config", {}).get("max_position_embeddings") or \
                GEMMA3_TEXT_DEFAULTS["max_position_embeddings"]
            want_layout = "half" if layout_half else "interleaved"
            run = subprocess.run([args.ropectl, "resolve", "--target=" + rs.address,
                                  "--hf_config=" + path], capture_output=True, text=True,
                                 timeout=TIMEOUT_S)
            line = next((l for l in run.stdout.splitlines() if "from the config.json:" in l), "")
            config = ropeserve.RopeConfig.from_hf(path)
            problems = []
            if run.returncode != 0 or "layout=%s (" % want_layout not in line or \
                    "max_len=%d (" % max_position not in line:
                problems.append("ropectl printed %r (exit %d) %s" % (line, run.returncode, run.stderr))
            if config.layout.value != want_layout or config.max_len != max_position:
                problems.append("from_hf gave layout %s max_len %d" % (config.layout.value, config.max_len))
            if problems:
                failures += 1
                print("FAIL defaults of %s: want layout=%s max_len=%d: %s"
                      % (name, want_layout, max_position, "; ".join(problems)))
            else:
                print("ok  defaults of %s: layout=%s max_len=%d" % (name, want_layout, max_position))
        status = rs.stop()
        if status != 0:
            failures += 1
            print("FAIL ropeserve exited with %s\n%s" % (status, rs.output))
    if failures:
        print("%d failure(s)" % failures)
        return 1
    print("all %d model checks passed" % (sum(len(m[1]) for m in MODELS)
                                          + sum(len(v[1]) for v in VARIANTS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
