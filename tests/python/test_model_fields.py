"""The RopeConfig fields that published models need, through a real server.

M-RoPE sections (Qwen2-VL / Qwen3-VL), YaRN's truncate (gpt-oss) and
LongRoPE's max_position_embeddings (Phi-3 / Phi-4): each round-trips through
the proto, and the server does with it what rope.proto says, checked against
values computed here in float64 from the formulas, or against plain RoPE.
"""

import math

import numpy as np
import pytest

import ropeserve

RNG = np.random.default_rng(20261201)


def test_new_fields_round_trip_through_the_proto():
    configs = [
        ropeserve.RopeConfig(head_dim=64, max_len=4096, theta=150000.0, layout="half",
                             scaling=ropeserve.YarnScaling(32.0, 4096, truncate=False)),
        ropeserve.RopeConfig(head_dim=64, max_len=4096, scaling=ropeserve.YarnScaling(4.0, 1024)),
        ropeserve.RopeConfig(head_dim=8, max_len=64, scaling=ropeserve.LongRopeScaling(
            (1.0, 2.0), (3.0, 4.0), 16, max_position_embeddings=512)),
        ropeserve.RopeConfig(head_dim=16, max_len=64, layout="half",
                             mrope=ropeserve.Mrope((2, 3, 3), interleaved=True)),
    ]
    for config in configs:
        assert ropeserve.RopeConfig.from_proto(config.to_proto()) == config
    assert configs[0].to_proto().yarn.HasField("truncate") and not configs[0].to_proto().yarn.truncate
    assert not configs[1].to_proto().yarn.HasField("truncate")  # absent = true on the server
    assert list(configs[3].to_proto().mrope.section) == [2, 3, 3]
    with pytest.raises(TypeError, match="RopeConfig.mrope is a tuple"):
        ropeserve.RopeConfig(head_dim=16, max_len=64, mrope=(2, 3, 3))


@pytest.mark.parametrize("interleaved", [False, True])
def test_mrope_with_three_equal_positions_is_plain_rope(client, interleaved):
    plain = ropeserve.RopeConfig(head_dim=32, max_len=256, theta=1000000.0, layout="half")
    mrope = plain.replace(mrope=ropeserve.Mrope((4, 6, 6), interleaved=interleaved))
    q = RNG.standard_normal((2, 5, 3, 32)).astype(np.float32)
    positions = RNG.integers(0, 256, size=(2, 5))
    want, _ = client.rotate(q, config=plain, positions=positions)
    got, _ = client.rotate(q, config=mrope, positions=np.stack([positions] * 3))
    np.testing.assert_array_equal(got, want)


def test_mrope_axes_follow_the_sections(client):
    # Chunked sections (2, 3, 3) of rotary_dim/2 = 8 frequencies: frequencies
    # 0-1 turn with t, 2-4 with h, 5-7 with w (transformers' Qwen2-VL).
    config = ropeserve.RopeConfig(head_dim=16, max_len=64, layout="half",
                                  mrope=ropeserve.Mrope((2, 3, 3)))
    plain = config.replace(mrope=None)
    q = RNG.standard_normal((1, 1, 1, 16)).astype(np.float32)
    t, h, w = 5, 9, 13
    got, _ = client.rotate(q, config=config, positions=np.array([[[t]], [[h]], [[w]]]))
    for position, frequencies in ((t, range(0, 2)), (h, range(2, 5)), (w, range(5, 8))):
        want, _ = client.rotate(q, config=plain, positions=[position])
        for i in frequencies:  # half layout: pair i is features (i, i + 8)
            np.testing.assert_allclose(got[..., [i, i + 8]], want[..., [i, i + 8]], rtol=1e-6, atol=1e-6)


def test_mrope_position_out_of_range_names_the_axis(client):
    config = ropeserve.RopeConfig(head_dim=16, max_len=64, mrope=ropeserve.Mrope((2, 3, 3)))
    q = np.zeros((1, 2, 1, 16), np.float32)
    with pytest.raises(ropeserve.OutOfRange, match="axis"):
        client.rotate(q, config=config, positions=np.array([[0, 1], [0, 64], [0, 1]]))


def test_yarn_truncate_false_keeps_the_fractional_correction_range(client):
    # gpt-oss-20b: theta 150000, head_dim 64, factor 32, original 4096:
    # low 8.0928, high 17.398 unrounded (rope.proto, YarnScaling).
    base = 150000.0
    config = ropeserve.RopeConfig(head_dim=64, max_len=4096, theta=base, layout="half",
                                  scaling=ropeserve.YarnScaling(32.0, 4096, truncate=False))
    got = client.table(config, start=0, count=1).inv_freq

    def correction_dim(rotations):
        return 64 * math.log(4096 / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(32.0), correction_dim(1.0)
    assert abs(low - 8.0928) < 1e-4 and abs(high - 17.398) < 1e-3
    want = []
    for i in range(32):
        inv = base ** (-2.0 * i / 64)
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        want.append(inv / 32.0 * ramp + inv * (1 - ramp))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    truncated = client.table(config.replace(scaling=ropeserve.YarnScaling(32.0, 4096)), count=1)
    assert not np.allclose(truncated.inv_freq, got)


def test_longrope_chooses_its_list_per_request_like_transformers(client):
    # With max_position_embeddings (transformers' rule): the list follows the
    # request's largest position + 1 against original_max_position_embeddings
    # (16), not max_len; the attention factor's ratio is max_position / original.
    short, long_ = (1.0, 1.5, 2.0, 2.5), (3.0, 4.0, 5.0, 6.0)
    scaling = ropeserve.LongRopeScaling(short, long_, 16, max_position_embeddings=64)
    config = ropeserve.RopeConfig(head_dim=8, max_len=1024, theta=10000.0, scaling=scaling)
    plain = np.array([10000.0 ** (-2.0 * i / 8) for i in range(4)])
    attention_factor = math.sqrt(1 + math.log(64 / 16) / math.log(16))
    within = client.table(config, start=0, count=16)  # positions 0..15: seq_len 16
    beyond = client.table(config, start=0, count=17)  # seq_len 17 > 16
    np.testing.assert_allclose(within.inv_freq, plain / np.array(short), rtol=1e-12)
    np.testing.assert_allclose(beyond.inv_freq, plain / np.array(long_), rtol=1e-12)
    assert within.attention_factor == pytest.approx(attention_factor, rel=1e-12)
    assert beyond.attention_factor == pytest.approx(attention_factor, rel=1e-12)
    # A client that does not send max_position_embeddings keeps the rule from
    # before the field existed: long iff max_len > original, ratio max_len / original.
    legacy = config.replace(scaling=ropeserve.LongRopeScaling(short, long_, 16))
    legacy_short_request = client.table(legacy, start=0, count=4)
    np.testing.assert_allclose(legacy_short_request.inv_freq, plain / np.array(long_), rtol=1e-12)
    assert legacy_short_request.attention_factor == pytest.approx(
        math.sqrt(1 + math.log(1024 / 16) / math.log(16)), rel=1e-12)
