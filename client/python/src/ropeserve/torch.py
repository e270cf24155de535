"""ropeserve for transformers models: a rotary module computed by ropeserve, and a patch.

RemoteRotaryEmbedding(client, config) stands in for a transformers model's
rotary module (LlamaRotaryEmbedding, Qwen3RotaryEmbedding, ...):

    cos, sin = rope(x, position_ids)           # as model.model.rotary_emb(x, position_ids)

returns transformers' cos and sin ([B, S, rotary_dim], cat(freqs, freqs),
times the attention factor, in x's dtype; M-RoPE position_ids [3, B, S] give
[3, B, S, rotary_dim]), read from the server's table (GetTable), and

    q, k = rope.rotate(q, k, position_ids)     # replaces apply_rotary_pos_emb(q, k, cos, sin)

rotates transformers' q [B, Hq, S, D] and k [B, Hkv, S, D] on the server
(Rotate), in either layout: HALF for rotate_half models (Llama, Qwen, ...),
INTERLEAVED for those that pair neighbours (GLM, Cohere, ...; DeepSeek-V3's
transformers code returns its rotated pairs in rotate_half order, which
changes no attention score). Gradients flow: a rotation's transpose is the
inverse rotation, which the backward pass asks the server for.

patch_model(model, client) makes a loaded transformers model rotate q and k
through ropeserve in every attention layer (see its docstring).
"""

import sys

import torch

from .config import Layout, RopeConfig

# The attribute patch_model leaves on a modeling module's apply_rotary_pos_emb
# it wrapped: the function it replaced.
_ORIGINAL = "_ropeserve_original"


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
    """rope.v1 positions for transformers' position_ids ([B, S], [1, S], [S]; M-RoPE [3, B, S]
    or [3, 1, S]); None: 0 .. S-1."""
    if position_ids is None:
        return None
    if not isinstance(position_ids, torch.Tensor):
        position_ids = torch.as_tensor(position_ids)
    if position_ids.is_floating_point():
        raise ValueError("position_ids is a %s tensor: expected integer positions (to rotate q and "
                         "k call rope.rotate(q, k, position_ids))" % position_ids.dtype)
    if position_ids.dim() == 3 and position_ids.shape[0] == 3 and position_ids.shape[1] == 1:
        return position_ids[:, 0]
    if position_ids.dim() == 3 and position_ids.shape[0] == 3 and position_ids.shape[1:] == (batch, seq):
        return position_ids
    if position_ids.dim() == 2 and position_ids.shape[0] == 1:
        position_ids = position_ids[0]
    if position_ids.shape not in (torch.Size([seq]), torch.Size([batch, seq])):
        raise ValueError("position_ids has shape %s: expected [%d, %d], [1, %d] or [%d] (M-RoPE: "
                         "[3, %d, %d])" % (list(position_ids.shape), batch, seq, seq, seq, batch, seq))
    return position_ids


class RemoteRotaryEmbedding(torch.nn.Module):
    """A transformers rotary module whose cos/sin and rotations come from ropeserve.

    client: a ropeserve.Client (shared; it is thread-safe).
    config: a ropeserve.RopeConfig (e.g. RopeConfig.from_hf(model.config.to_dict())), either
        layout; partial rotary (rotary_dim < D) rotates the first rotary_dim features.
    """

    def __init__(self, client, config):
        super().__init__()
        if not isinstance(config, RopeConfig):
            raise TypeError("config is a %s: expected a ropeserve.RopeConfig" % type(config).__name__)
        self.client = client
        self.config = config

    def forward(self, x, position_ids):
        """transformers' (cos, sin) for position_ids: [B, S, rotary_dim] in x's dtype (M-RoPE
        position_ids [3, B, S]: [3, B, S, rotary_dim]), from the server's table."""
        if not isinstance(position_ids, torch.Tensor):
            position_ids = torch.as_tensor(position_ids)
        if position_ids.is_floating_point():
            raise ValueError("position_ids is a %s tensor: rope(x, position_ids) returns cos and sin; "
                             "to rotate q and k call rope.rotate(q, k, position_ids)"
                             % position_ids.dtype)
        if position_ids.numel() == 0:
            raise ValueError("position_ids is empty")
        first, last = int(position_ids.min()), int(position_ids.max())
        table = self.client.table(self.config, start=first, count=last - first + 1)
        # transformers' emb = cat(freqs, freqs): the same half table twice.
        cos = torch.from_numpy(table.cos.copy())
        sin = torch.from_numpy(table.sin.copy())
        rows = (position_ids.to(torch.int64) - first).cpu()
        cos = torch.cat((cos, cos), dim=-1)[rows]
        sin = torch.cat((sin, sin), dim=-1)[rows]
        dtype = x.dtype if isinstance(x, torch.Tensor) and x.is_floating_point() else torch.float32
        device = x.device if isinstance(x, torch.Tensor) else "cpu"
        return cos.to(dtype=dtype, device=device), sin.to(dtype=dtype, device=device)

    def rotate(self, q, k=None, position_ids=None, *, layout="bhsd"):
        """(q, k) rotated by the server (k None when not given).

        q [B, Hq, S, D], k [B, Hkv, S, D] (layout "bhsd", transformers' attention), or
        [B, S, H, D] (layout "bshd"); CPU tensors. Results have the inputs' dtypes.
        """
        if layout not in ("bhsd", "bshd"):
            raise ValueError("layout is %r: expected 'bhsd' or 'bshd'" % (layout,))
        for name, x in (("q", q), ("k", k)):
            if x is not None and (not isinstance(x, torch.Tensor) or x.dim() != 4):
                raise ValueError("%s must be a [B, H, S, D] torch tensor, got %s" % (
                    name, list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__))
        as_bshd = (lambda t: t.transpose(1, 2)) if layout == "bhsd" else (lambda t: t)
        batch, seq = (q.shape[0], q.shape[2]) if layout == "bhsd" else (q.shape[0], q.shape[1])
        positions = _positions(position_ids, batch, seq)
        q_out, k_out = _RemoteRotate.apply(self.client, self.config, positions, as_bshd(q),
                                           as_bshd(k) if k is not None else None)
        # float64 travels as float32 (ropeserve._tensors): back to the caller's dtype.
        q_out = as_bshd(q_out).to(dtype=q.dtype)
        k_out = as_bshd(k_out).to(dtype=k.dtype) if k_out is not None else None
        return q_out, k_out

    def extra_repr(self):
        return "target=%s, config=%r" % (getattr(self.client, "target", "?"), self.config)


# ---- patch_model -------------------------------------------------------------------------

class _PositionsForRotate:
    """What the patched rotary module hands the attention layers in place of cos and sin:
    the positions, for the wrapped apply_rotary_pos_emb to send with q and k."""

    __slots__ = ("rope", "position_ids")

    def __init__(self, rope, position_ids):
        self.rope = rope
        self.position_ids = position_ids


class _RotateThroughService(torch.nn.Module):
    """Replaces a model's rotary module: returns (positions, positions) for the attention
    layers' apply_rotary_pos_emb (wrapped by patch_model) to rotate q and k remotely."""

    def __init__(self, rope, replaced):
        super().__init__()
        self.rope = rope
        self.replaced = replaced  # the original module, put back by unpatch

    def forward(self, x, position_ids):
        positions = _PositionsForRotate(self.rope, position_ids)
        return positions, positions

    def extra_repr(self):
        return "rotates q and k through %s" % self.rope.extra_repr()


def _dispatching(original):
    """apply_rotary_pos_emb that rotates remotely when given _PositionsForRotate, and is
    `original` otherwise (other models of the same class in the process are unchanged)."""

    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        if isinstance(cos, _PositionsForRotate):
            unsqueeze_dim = kwargs.get("unsqueeze_dim", args[1] if len(args) > 1 else 1)
            return cos.rope.rotate(q, k, cos.position_ids,
                                   layout="bhsd" if unsqueeze_dim == 1 else "bshd")
        return original(q, k, cos, sin, *args, **kwargs)

    setattr(apply_rotary_pos_emb, _ORIGINAL, original)
    apply_rotary_pos_emb.__doc__ = original.__doc__
    return apply_rotary_pos_emb


class PatchedModel:
    """What patch_model changed; unpatch() puts the model's rotary modules back."""

    def __init__(self, model, rope, swapped):
        self.model = model
        self.rope = rope
        self._swapped = swapped  # (parent module, attribute name, original module)

    def unpatch(self):
        for parent, name, original in self._swapped:
            setattr(parent, name, original)
        self._swapped = []

    def __repr__(self):
        return "PatchedModel(%s, %d rotary module(s), %s)" % (
            type(self.model).__name__, len(self._swapped), self.rope.extra_repr())


def patch_model(model, client, config=None):
    """Makes a loaded transformers model rotate q and k through ropeserve.

    Every attention layer then sends its q and k to the server (Rotate, one
    call per layer and forward) instead of applying cos and sin itself.
    config: default RopeConfig.from_hf(model.config.to_dict()): the server
    reads the model's rope parameters, the layout follows the model_type, and
    max_len is max_position_embeddings.

    Works with models whose rotary module (a submodule named *RotaryEmbedding)
    returns (cos, sin) that the decoder hands to each attention layer, whose
    modeling module applies them with a module-level apply_rotary_pos_emb(q,
    k, cos, sin, ...) (Llama, Mistral, Qwen2/3, Gemma, Phi-3, ... in
    transformers 4.4x); that function is wrapped to send q and k to the server
    when handed this patch's positions, and works as before for every other
    model. Returns a PatchedModel; .unpatch() undoes it. ValueError when the
    model has no such rotary module, or more than one (Gemma 3's local and
    global ones need a config each).
    """
    if config is None:
        config = RopeConfig.from_hf(model.config.to_dict())
    rope = RemoteRotaryEmbedding(client, config)
    rotary = [(name, module) for name, module in model.named_modules()
              if type(module).__name__.endswith("RotaryEmbedding")]
    if len(rotary) != 1:
        raise ValueError("patch_model: %s has %d rotary modules (%s): expected one"
                         % (type(model).__name__, len(rotary), ", ".join(n for n, _ in rotary) or "none"))
    modeling = {sys.modules.get(type(m).__module__) for m in model.modules()}
    wrapped = 0
    for module in modeling:
        function = getattr(module, "apply_rotary_pos_emb", None)
        if function is None:
            continue
        if not hasattr(function, _ORIGINAL):
            module.apply_rotary_pos_emb = _dispatching(function)
        wrapped += 1
    if wrapped == 0:
        raise ValueError("patch_model: no modeling module of %s has apply_rotary_pos_emb"
                         % type(model).__name__)
    name, original = rotary[0]
    parent_name, _, attribute = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, attribute, _RotateThroughService(rope, original))
    return PatchedModel(model, rope, [(parent, attribute, original)])
