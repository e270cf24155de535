"""Client.attention_scores with `results`: each result by name, against the SCORES
path of the same request and the float64 reference; OUTPUT and LSE of disjoint key
ranges (separate calls) merged by ropeserve.merge_attention equal one call."""

import numpy as np
import pytest

import ropeserve
import rope_reference as ref

RNG = np.random.default_rng(33)
CONFIG = ropeserve.RopeConfig(head_dim=16, max_len=256, theta=10000.0, layout="half")
INV = ref.plain_inv_freq(10000.0, 16)


def test_results_come_back_by_name_and_match_the_scores_path(client):
    q = RNG.standard_normal((1, 6, 4, 16)).astype(np.float32)
    k = RNG.standard_normal((1, 9, 2, 16)).astype(np.float32)
    v = RNG.standard_normal((1, 9, 2, 8)).astype(np.float32)
    masks = dict(causal=True, q_start_pos=3, window_left=4, softcap=20.0, sinks=[0.0, -1.0, 0.5, 1.0])
    probs, legacy_out = client.attention_scores(q, k, v, config=CONFIG, softmax=True, **masks)

    got = client.attention_scores(q, k, v, config=CONFIG, softmax=True,
                                  results=["output", "lse", "top_k", "key_mass", "score_rows"],
                                  top_k=3, score_rows_start=2, score_rows_count=2, **masks)
    assert isinstance(got, ropeserve.AttentionResults)
    assert sorted(got) == ["key_mass", "lse", "output", "score_rows", "top_k_indices", "top_k_probs"]
    assert got.scores is None
    assert got["output"].shape == (1, 6, 4, 8) and got.output.dtype == np.float32
    assert got.lse.shape == (1, 4, 6)
    assert got.top_k_indices.dtype == np.int32 and got.top_k_indices.shape == (1, 4, 6, 3)
    assert got.top_k_probs.shape == (1, 4, 6, 3)
    assert got.key_mass.shape == (1, 4, 9)
    assert got.score_rows.shape == (1, 4, 2, 9)

    np.testing.assert_allclose(got.output, legacy_out, atol=2e-5)
    np.testing.assert_allclose(got.score_rows, probs[:, :, 2:4, :], atol=1e-6)
    np.testing.assert_allclose(got.key_mass, probs.sum(axis=2), atol=1e-5)
    # Probabilities over real keys sum to 1 - exp(sink - LSE) with sinks.
    sinks = np.array(masks["sinks"])[None, :, None]
    np.testing.assert_allclose(probs.sum(axis=3), 1 - np.exp(sinks - got.lse), atol=1e-5)
    order = np.argsort(-probs, axis=3, kind="stable")[..., :3]
    np.testing.assert_array_equal(got.top_k_indices, order)
    np.testing.assert_allclose(got.top_k_probs, np.take_along_axis(probs, order, axis=3), atol=1e-6)


def test_lse_matches_the_float64_reference(client):
    q = RNG.standard_normal((2, 5, 2, 16)).astype(np.float32)
    k = RNG.standard_normal((2, 7, 1, 16)).astype(np.float32)
    got = client.attention_scores(q, k, config=CONFIG, q_start_pos=2, causal=True, results=["lse"])
    logits, _ = ref.attention_scores(q.astype(np.float64), k.astype(np.float64), None, 2, 0, INV, True,
                                     True, False, 1 / np.sqrt(16))
    with np.errstate(divide="ignore"):
        want = np.log(np.exp(logits).sum(axis=3))
    np.testing.assert_allclose(got.lse, want, atol=2e-5)


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_key_ranges_merged_equal_one_call(client, parts):
    q = RNG.standard_normal((1, 4, 2, 16)).astype(np.float32)
    k = RNG.standard_normal((1, 40, 2, 16)).astype(np.float32)
    v = RNG.standard_normal((1, 40, 2, 8)).astype(np.float32)
    whole = client.attention_scores(q, k, v, config=CONFIG, q_start_pos=36, causal=True,
                                    results=["output", "lse"])
    bounds = np.linspace(0, 40, parts + 1).astype(int)
    outputs, lses = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        r = client.attention_scores(q, k[:, lo:hi], v[:, lo:hi], config=CONFIG, q_start_pos=36,
                                    k_start_pos=int(lo), causal=True, results=["output", "lse"])
        outputs.append(r.output)
        lses.append(r.lse)
    output, lse = ropeserve.merge_attention(outputs, lses)
    np.testing.assert_allclose(output, whole.output, atol=2e-5)
    np.testing.assert_allclose(lse, whole.lse, atol=2e-5)


def test_unknown_result_name_is_refused_before_the_call(client):
    q = np.zeros((1, 1, 1, 16), np.float32)
    with pytest.raises(ValueError, match="results has 'weights'"):
        client.attention_scores(q, q, config=CONFIG, results=["weights"])


def test_bad_window_is_invalid_argument_naming_it(client):
    q = np.zeros((1, 1, 1, 16), np.float32)
    with pytest.raises(ropeserve.InvalidArgument, match="window_left is -2"):
        client.attention_scores(q, q, config=CONFIG, results=["lse"], window_left=-2)


def test_info_advertises_what_attention_scores_takes(client):
    info = client.info()
    assert list(info.supported_attention_results) == ["SCORES", "OUTPUT", "LSE", "TOP_K", "KEY_MASS",
                                                      "SCORE_ROWS"]
    assert list(info.supported_attention_masks) == ["causal", "window_left", "window_right", "chunk_size"]
    assert list(info.supported_attention_transforms) == ["softcap", "alibi_slopes", "sinks"]
    # Each advertised result is one the client can ask for by name.
    q = RNG.standard_normal((1, 3, 2, 16)).astype(np.float32)
    k = RNG.standard_normal((1, 4, 1, 16)).astype(np.float32)
    v = RNG.standard_normal((1, 4, 1, 8)).astype(np.float32)
    for name in info.supported_attention_results:
        got = client.attention_scores(q, k, v, config=CONFIG, results=[name.lower()], top_k=2,
                                      score_rows_start=0, score_rows_count=1)
        assert len(got) >= 1, name
