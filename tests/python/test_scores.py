"""Client.attention_scores against the float64 reference: causal softmax, v, GQA, scale."""

import numpy as np
import pytest
import torch

import ropeserve
import rope_reference as ref
from tensor_kinds import KIND_IDS, KINDS, as_float64, check_kind, make

RNG = np.random.default_rng(99)
CONFIG = ropeserve.RopeConfig(head_dim=16, max_len=64, theta=500000.0, layout="half")
INV = ref.plain_inv_freq(500000.0, 16)


@pytest.mark.parametrize("kind,dtype", KINDS, ids=KIND_IDS)
def test_causal_softmax_with_v_and_gqa(client, kind, dtype):
    q = make(kind, dtype, RNG.standard_normal((2, 5, 4, 16)))
    k = make(kind, dtype, RNG.standard_normal((2, 7, 2, 16)))
    v = make(kind, dtype, RNG.standard_normal((2, 7, 2, 8)))
    probs, output = client.attention_scores(q, k, v, config=CONFIG, q_start_pos=2, k_start_pos=0,
                                            causal=True, softmax=True)
    check_kind(probs, kind, "float32", (2, 4, 5, 7))  # scores are float32 whatever the input dtype
    check_kind(output, kind, "float32", (2, 5, 4, 8))
    want_p, want_out = ref.attention_scores(as_float64(q), as_float64(k), as_float64(v), 2, 0, INV, True,
                                            True, True, 1 / np.sqrt(16))
    ref.assert_close(as_float64(probs), want_p, "float32", absolute=2e-6, what="probabilities")
    ref.assert_close(as_float64(output), want_out, "float32", absolute=1e-5, what="output")
    # Keys after each query's position get probability 0.
    assert np.all(as_float64(probs)[:, :, 0, 3:] == 0)


def test_raw_scores_with_mask_and_explicit_scale(client):
    q = RNG.standard_normal((1, 4, 2, 16)).astype(np.float32)
    k = RNG.standard_normal((1, 6, 1, 16)).astype(np.float32)
    scores, output = client.attention_scores(q, k, config=CONFIG, q_start_pos=1, k_start_pos=0, causal=True,
                                             scale=0.5)
    assert output is None
    want, _ = ref.attention_scores(q, k, None, 1, 0, INV, True, True, False, 0.5)
    ref.assert_close(scores, want, "float32", absolute=1e-5)
    assert np.isneginf(scores[0, 0, 0, 2])


def test_fully_masked_rows_give_zero_probabilities(client):
    q = torch.randn(1, 2, 2, 16)
    k = torch.randn(1, 3, 2, 16)
    probs, _ = client.attention_scores(q, k, config=CONFIG, q_start_pos=0, k_start_pos=5, causal=True,
                                       softmax=True)
    assert isinstance(probs, torch.Tensor)
    assert torch.count_nonzero(probs) == 0


def test_non_causal_scores_rank3(client):
    q = RNG.standard_normal((3, 2, 16)).astype(np.float16)
    k = RNG.standard_normal((4, 2, 16)).astype(np.float16)
    scores, _ = client.attention_scores(q, k, config=CONFIG, q_start_pos=10, k_start_pos=3)
    assert scores.shape == (1, 2, 3, 4)
    want, _ = ref.attention_scores(as_float64(q)[None], as_float64(k)[None], None, 10, 3, INV, True, False,
                                   False, 0.25)
    ref.assert_close(scores, want, "float32", absolute=1e-5)
