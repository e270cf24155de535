"""Qwen3 for transformers 4.49, which predates it (Qwen3 arrived in 4.51, which needs torch 2).

A restatement of transformers' modeling_qwen3.py on 4.49's Qwen2 classes:
Qwen3's decoder is Qwen2's with two changes to attention, both kept here:
projections without bias (config.attention_bias, default False) and an
RMSNorm over head_dim applied to q and k before RoPE (q_norm, k_norm);
head_dim is its own config key. RoPE is Llama's: the rotary module's cos and
sin, applied by this module's apply_rotary_pos_emb (rotate_half), the
function ropeserve.torch.patch_model wraps in every modeling module.
"""

from typing import Callable, Optional

import torch
from torch import nn
from transformers.models.qwen2 import modeling_qwen2 as qwen2
from transformers.models.qwen2.configuration_qwen2 import Qwen2Config


class Qwen3Config(Qwen2Config):
    model_type = "qwen3"

    def __init__(self, head_dim=128, attention_bias=False, **kwargs):
        super().__init__(**kwargs)
        self.head_dim = head_dim
        self.attention_bias = attention_bias


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class Qwen3Attention(qwen2.Qwen2Attention):
    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = qwen2.Qwen2RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = qwen2.Qwen2RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask,
                past_key_value=None, cache_position: Optional[torch.LongTensor] = None, **kwargs):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_value is not None:
            cache_kwargs = {"sin": sin, "cos": cos, "cache_position": cache_position}
            key_states, value_states = past_key_value.update(key_states, value_states, self.layer_idx,
                                                             cache_kwargs)
        attention_interface: Callable = qwen2.eager_attention_forward
        if self.config._attn_implementation != "eager":
            attention_interface = qwen2.ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
        attn_output, attn_weights = attention_interface(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
            sliding_window=None, **kwargs)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class Qwen3ForCausalLM(qwen2.Qwen2ForCausalLM):
    config_class = Qwen3Config

    def __init__(self, config):
        super().__init__(config)
        for index, layer in enumerate(self.model.layers):
            layer.self_attn = Qwen3Attention(config, index)
        self.post_init()
