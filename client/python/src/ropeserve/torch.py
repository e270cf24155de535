"""ropeserve.torch.RemoteRotaryEmbedding: Hugging Face's rotary embedding, computed by ropeserve.

In a transformers-style attention layer,

    cos, sin = rotary_emb(value_states, position_ids)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)

becomes

    rope = RemoteRotaryEmbedding(client, RopeConfig(head_dim=128, max_len=8192,
                                                    theta=500000.0, layout="half"))
    q, k = rope(q, k, position_ids)

for q [B, Hq, S, D] and k [B, Hkv, S, D] (transformers' layout), CPU
float32 / float16 / bfloat16. The layout must be HALF: transformers'
rotate_half pairs feature i with i + D/2. Gradients flow: a rotation's
transpose is the inverse rotation (cos, -sin), which the backward pass asks
the server for.
"""

import torch

from .config import Layout, RopeConfig


class _RemoteRotate(torch.autograd.Function):
    """rotate() as an autograd op; q and k are [B, S, H, D] views."""

    @staticmethod
    def forward(ctx, client, config, positions, q, k):
        ctx.client, ctx.config, ctx.positions = client, config, positions
        q_out, k_out = client.rotate(q, k, config=config, positions=positions)
        return q_out, k_out

    @staticmethod
    def backward(ctx, grad_q, grad_k):
        kwargs = dict(config=ctx.config, positions=ctx.positions, inverse=True)
        if grad_q is None:
            grad_k, _ = ctx.client.rotate(grad_k, **kwargs)
        elif grad_k is None:
            grad_q, _ = ctx.client.rotate(grad_q, **kwargs)
        else:
            grad_q, grad_k = ctx.client.rotate(grad_q, grad_k, **kwargs)
        return None, None, None, grad_q, grad_k


def _positions(position_ids, batch, seq):
    """rope.v1 positions for transformers' position_ids ([B, S], [1, S] or [S]); None: 0 .. S-1."""
    if position_ids is None:
        return None
    if not isinstance(position_ids, torch.Tensor):
        position_ids = torch.as_tensor(position_ids)
    if position_ids.dim() == 2 and position_ids.shape[0] == 1:
        position_ids = position_ids[0]
    if position_ids.shape not in (torch.Size([seq]), torch.Size([batch, seq])):
        raise ValueError("position_ids has shape %s: expected [%d, %d], [1, %d] or [%d]"
                         % (list(position_ids.shape), batch, seq, seq, seq))
    return position_ids


class RemoteRotaryEmbedding(torch.nn.Module):
    """Rotates q and k ([B, H, S, D]) by position_ids through a ropeserve.Client.

    client: a ropeserve.Client (shared; it is thread-safe).
    config: a ropeserve.RopeConfig with layout HALF (rotate_half); its
        head_dim is D, and partial rotary (rotary_dim < D) rotates the first
        rotary_dim features as GPT-NeoX / Phi do.
    """

    def __init__(self, client, config):
        super().__init__()
        if not isinstance(config, RopeConfig):
            raise TypeError("config is a %s: expected a ropeserve.RopeConfig" % type(config).__name__)
        if config.layout is not Layout.HALF:
            raise ValueError("config.layout is %s: transformers' apply_rotary_pos_emb (rotate_half) is "
                             "Layout.HALF" % config.layout.name)
        self.client = client
        self.config = config

    def forward(self, q, k=None, position_ids=None):
        """(q, k) rotated, [B, H, S, D] each (k None when not given)."""
        for name, x in (("q", q), ("k", k)):
            if x is not None and (not isinstance(x, torch.Tensor) or x.dim() != 4):
                raise ValueError("%s must be a [B, H, S, D] torch tensor, got %s" % (
                    name, list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__))
        batch, _, seq, _ = q.shape
        positions = _positions(position_ids, batch, seq)
        q_out, k_out = _RemoteRotate.apply(self.client, self.config, positions, q.transpose(1, 2),
                                           k.transpose(1, 2) if k is not None else None)
        return q_out.transpose(1, 2), (k_out.transpose(1, 2) if k_out is not None else None)

    def extra_repr(self):
        return "target=%s, config=%r" % (getattr(self.client, "target", "?"), self.config)
