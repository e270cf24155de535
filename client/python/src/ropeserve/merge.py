"""Merging attention computed over disjoint key ranges (FlashInfer's merge_state).

Attention of one set of queries over keys K = K_1 + ... + K_n (disjoint
ranges) can be computed range by range, by different calls or different
replicas, each asking for OUTPUT and LSE, and combined exactly:

    lse = log(sum_r exp(lse_r))
    out = sum_r exp(lse_r - lse) * out_r

because out_r is the softmax-weighted mean of the values of range r and
exp(lse_r) its share of the softmax denominator.

    parts = [client.attention_scores(q, k[:, a:b], v[:, a:b], config=config,
                                     q_start_pos=pos, k_start_pos=a, results=("output", "lse"))
             for a, b in ranges]
    output, lse = ropeserve.merge_attention([p.output for p in parts], [p.lse for p in parts])

Shapes are the service's: outputs [B, Sq, Hq, Dv] (or [Sq, Hq, Dv]) and
LSEs [B, Hq, Sq] (or [Hq, Sq]), natural log. A range that no query sees has
LSE -inf and output 0 and weighs nothing; rows that see no key in any range
come out as 0 with LSE -inf. Attention sinks belong in exactly one of the
calls (each call's LSE includes the sinks it was given).
"""

import numpy as np


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def merge_attention(outputs, lses):
    """Combines per-range (output, lse) pairs into the attention over all ranges.

    outputs: sequence of arrays [B, Sq, Hq, Dv] or [Sq, Hq, Dv];
    lses: sequence of arrays [B, Hq, Sq] or [Hq, Sq], one per output.
    Returns (output, lse) in the same layouts, float32: numpy arrays, or torch
    tensors when the inputs are torch tensors (on their device). The
    arithmetic is float64.
    Raises ValueError when the lists are empty, differ in length, or the
    shapes do not agree.
    """
    outputs = list(outputs)
    lses = list(lses)
    if not outputs:
        raise ValueError("merge_attention: no outputs given")
    if len(outputs) != len(lses):
        raise ValueError(f"merge_attention: {len(outputs)} outputs but {len(lses)} lses")
    if all(_is_torch(x) for x in outputs + lses):
        return _merge_torch(outputs, lses)
    outs = [np.asarray(o, dtype=np.float64) for o in outputs]
    ls = [np.asarray(l, dtype=np.float64) for l in lses]
    _check_shapes([o.shape for o in outs], [l.shape for l in ls])
    rank3 = outs[0].ndim == 3
    if rank3:
        outs = [o[None] for o in outs]
        ls = [l[None] for l in ls]
    stacked = np.stack(ls)                        # [n, B, Hq, Sq]
    top = stacked.max(axis=0)                     # [B, Hq, Sq]
    finite = np.isfinite(top)
    safe_top = np.where(finite, top, 0.0)
    weights = np.where(np.isfinite(stacked), np.exp(stacked - safe_top), 0.0)
    total = weights.sum(axis=0)
    lse = np.where(finite, safe_top + np.log(np.where(finite, total, 1.0)), -np.inf)
    share = weights / np.where(total > 0, total, 1.0)  # [n, B, Hq, Sq]
    # [n, B, Hq, Sq] -> [n, B, Sq, Hq, 1] to weigh outputs [B, Sq, Hq, Dv].
    share = np.transpose(share, (0, 1, 3, 2))[..., None]
    out = (share * np.stack(outs)).sum(axis=0)
    out = out.astype(np.float32)
    lse = lse.astype(np.float32)
    if rank3:
        out, lse = out[0], lse[0]
    return out, lse


def _check_shapes(out_shapes, lse_shapes):
    first = out_shapes[0]
    if len(first) not in (3, 4):
        raise ValueError(f"merge_attention: outputs[0] has shape {first}: must be "
                         "[B, Sq, Hq, Dv] or [Sq, Hq, Dv]")
    for i, shape in enumerate(out_shapes):
        if shape != first:
            raise ValueError(f"merge_attention: outputs[{i}] has shape {shape}, outputs[0] {first}")
    want = (first[0], first[2], first[1]) if len(first) == 4 else (first[1], first[0])
    for i, shape in enumerate(lse_shapes):
        if tuple(shape) != want:
            raise ValueError(f"merge_attention: lses[{i}] has shape {tuple(shape)}: must be "
                             f"{want} for outputs of shape {first}")


def _merge_torch(outputs, lses):
    import torch
    _check_shapes([tuple(o.shape) for o in outputs], [tuple(l.shape) for l in lses])
    device = outputs[0].device
    outs = [o.to(torch.float64) for o in outputs]
    ls = [l.to(device=device, dtype=torch.float64) for l in lses]
    rank3 = outs[0].dim() == 3
    if rank3:
        outs = [o.unsqueeze(0) for o in outs]
        ls = [l.unsqueeze(0) for l in ls]
    stacked = torch.stack(ls)
    top = stacked.max(dim=0).values
    finite = torch.isfinite(top)
    safe_top = torch.where(finite, top, torch.zeros_like(top))
    weights = torch.where(torch.isfinite(stacked), torch.exp(stacked - safe_top),
                          torch.zeros_like(stacked))
    total = weights.sum(dim=0)
    lse = torch.where(finite, safe_top + torch.log(torch.where(finite, total, torch.ones_like(total))),
                      torch.full_like(total, float("-inf")))
    share = weights / torch.where(total > 0, total, torch.ones_like(total))
    share = share.permute(0, 1, 3, 2).unsqueeze(-1)
    out = (share * torch.stack(outs)).sum(dim=0)
    out = out.to(torch.float32)
    lse = lse.to(torch.float32)
    if rank3:
        out, lse = out[0], lse[0]
    return out, lse
