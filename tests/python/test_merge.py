"""ropeserve.merge_attention: per-key-range (output, lse) pairs merge into the whole range's.

The ranges' attention comes from a float64 numpy reference here (softmax
over keys with a causal mask); the service's own OUTPUT/LSE merging is in
test_attention_results.py.
"""

import numpy as np
import pytest

import ropeserve


def _attention(q, k, v, q_pos, k_pos, sinks=None):
    """Reference OUTPUT [Sq, Hq, Dv] and LSE [Hq, Sq] with a causal mask (float64)."""
    sq, hq, _ = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    out = np.zeros((sq, hq, v.shape[2]))
    lse = np.full((hq, sq), -np.inf)
    for h in range(hq):
        s = q[:, h, :] @ k[:, h // group, :].T / np.sqrt(q.shape[2])
        s = np.where(k_pos[None, :] <= q_pos[:, None], s, -np.inf)
        logits = [s]
        if sinks is not None:
            logits.append(np.full((sq, 1), sinks[h]))
        full = np.concatenate(logits, axis=1)
        top = full.max(axis=1)
        safe = np.where(np.isfinite(top), top, 0.0)
        total = np.exp(full - safe[:, None]).sum(axis=1)
        lse[h] = np.where(np.isfinite(top), safe + np.log(np.where(total > 0, total, 1.0)), -np.inf)
        p = np.where(np.isfinite(lse[h])[:, None], np.exp(s - np.where(np.isfinite(lse[h]), lse[h], 0.0)[:, None]), 0.0)
        out[:, h, :] = p @ v[:, h // group, :]
    return out, lse


@pytest.mark.parametrize("ranges", [2, 3, 5, 8])
def test_merge_of_key_ranges_equals_one_call(ranges):
    rng = np.random.default_rng(ranges)
    sq, sk, hq, hkv, d, dv = 40, 300, 8, 2, 16, 8
    q = rng.uniform(-1, 1, (sq, hq, d))
    k = rng.uniform(-1, 1, (sk, hkv, d))
    v = rng.uniform(-1, 1, (sk, hkv, dv))
    q_pos = np.arange(sq) + 100  # queries 100..139: later key ranges are hidden from some
    k_pos = np.arange(sk)
    sinks = np.linspace(-1, 1, hq)
    whole_out, whole_lse = _attention(q, k, v, q_pos, k_pos, sinks)
    edges = np.linspace(0, sk, ranges + 1).astype(int)
    outs, lses = [], []
    for r in range(ranges):
        a, b = edges[r], edges[r + 1]
        o, l = _attention(q, k[a:b], v[a:b], q_pos, k_pos[a:b], sinks if r == 0 else None)
        outs.append(o.astype(np.float32))
        lses.append(l.astype(np.float32))
    out, lse = ropeserve.merge_attention(outs, lses)
    assert out.dtype == np.float32 and out.shape == (sq, hq, dv) and lse.shape == (hq, sq)
    np.testing.assert_allclose(lse, whole_lse, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(out, whole_out, rtol=0, atol=2e-6)


def test_rows_no_range_sees_are_zero_and_minus_infinity():
    out = np.ones((1, 2, 3, 4), np.float32)
    lse = np.full((1, 3, 2), -np.inf, np.float32)
    merged, merged_lse = ropeserve.merge_attention([out * 0, out * 0], [lse, lse])
    assert np.all(merged == 0) and np.all(np.isneginf(merged_lse))


def test_batched_layouts_and_torch_tensors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    outs = [rng.standard_normal((2, 5, 4, 3)).astype(np.float32) for _ in range(3)]
    lses = [rng.standard_normal((2, 4, 5)).astype(np.float32) for _ in range(3)]
    want_out, want_lse = ropeserve.merge_attention(outs, lses)
    got_out, got_lse = ropeserve.merge_attention([torch.from_numpy(o) for o in outs],
                                                 [torch.from_numpy(l) for l in lses])
    assert isinstance(got_out, torch.Tensor) and got_out.dtype == torch.float32
    np.testing.assert_allclose(got_out.numpy(), want_out, atol=1e-6)
    np.testing.assert_allclose(got_lse.numpy(), want_lse, atol=1e-6)
    # The weights: lse = logaddexp of the parts.
    np.testing.assert_allclose(want_lse, np.logaddexp.reduce(np.stack(lses).astype(np.float64)), rtol=1e-6)


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="no outputs"):
        ropeserve.merge_attention([], [])
    with pytest.raises(ValueError, match="2 outputs but 1 lses"):
        ropeserve.merge_attention([np.zeros((1, 2, 3))] * 2, [np.zeros((2, 1))])
    with pytest.raises(ValueError, match=r"lses\[0\] has shape \(1, 2\): must be \(2, 1\)"):
        ropeserve.merge_attention([np.zeros((1, 2, 3))], [np.zeros((1, 2))])
