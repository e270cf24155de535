"""Axial RoPE, fractional positions and BuildPositions through the Python client.

The numbers of each published model are checked in tests/e2e/vision_models_test.py;
here: the API (configs on the wire and back, numpy / torch positions of both
kinds, Positions' shapes, the asyncio twin, errors) against a real server.
"""

import asyncio

import numpy as np
import pytest

import ropeserve

FLUX = ropeserve.RopeConfig(head_dim=128, max_len=1024, theta=10000.0, axial=ropeserve.AxialRope.flux())


def test_axial_config_round_trips_and_resolves(client):
    hunyuan = ropeserve.RopeConfig(head_dim=128, max_len=256, theta=256.0, axial=ropeserve.AxialRope(
        (ropeserve.RopeAxis(16, theta_rescale=2.0), 56, ropeserve.RopeAxis(56, interpolation=0.5))))
    assert ropeserve.RopeConfig.from_proto(hunyuan.to_proto()) == hunyuan
    assert ropeserve.AxialRope.wan(128).axes == tuple(ropeserve.RopeAxis(d) for d in (44, 42, 42))
    assert ropeserve.AxialRope.sam2(256).axes == (ropeserve.RopeAxis(128), ropeserve.RopeAxis(128))
    resolved = client.resolve(hunyuan)
    assert len(resolved.message.axis_table_keys) == 3
    assert resolved.config.axial.axes[1] == ropeserve.RopeAxis(56, 256.0, 1.0, 1.0)
    # The second axis (interpolation 1) starts its ladder at 1; the third at 0.5.
    assert resolved.message.inv_freq[8] == 1.0 and resolved.message.inv_freq[36] == 0.5


def test_integer_and_float_positions_and_build(client):
    torch = pytest.importorskip("torch")
    q = torch.randn(2, 6, 3, 128)
    grid = ropeserve.Grid((1, 2, 3))
    built = client.build_positions([grid])
    assert built.positions.dtype == np.int64 and built.positions.shape == (3, 6)
    assert built.rope_deltas is None
    by_numpy, _ = client.rotate(q, config=FLUX, positions=built.positions)
    by_torch, _ = client.rotate(q, config=FLUX, positions=torch.from_numpy(built.positions))
    by_build, _ = client.rotate(q, config=FLUX, build=[grid])
    assert torch.equal(by_numpy, by_torch) and torch.equal(by_numpy, by_build)
    # Floats are fractional positions, computed directly: equal to the table's rows
    # to float32 rounding, for integer values.
    fractional, _ = client.rotate(q, config=FLUX, positions=built.positions.astype(np.float64))
    np.testing.assert_allclose(fractional.numpy(), by_numpy.numpy(), atol=2e-6)
    halves = ropeserve.Grid((1, 2, 3), step=(1.0, 0.5, 0.5))
    assert client.build_positions([halves]).positions.dtype == np.float64


def test_token_positions_shapes(client):
    config_json = '{"model_type": "qwen2_vl", "vision_config": {"spatial_merge_size": 2}}'
    ids = np.array([[1, 151652, 151655, 151655, 151655, 151655, 2],
                    [0, 0, 1, 2, 3, 4, 5]])
    built = client.build_positions(ropeserve.TokenPositions(
        input_ids=ids, hf_config=config_json, attention_mask=(ids != 0).astype(np.int64),
        image_grid_thw=[[1, 4, 4]]))
    assert built.positions.shape == (3, 2, 7)
    assert built.positions[:, 0].tolist() == [[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4],
                                              [0, 1, 2, 3, 2, 3, 4]]
    assert built.positions[:, 1, :2].tolist() == [[1, 1]] * 3  # padding
    assert built.rope_deltas.tolist() == [4 + 1 - 7, 4 + 1 - 7]


def test_fractional_attention_scores(client):
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 3, 2, 64)
    k = torch.randn(1, 4, 2, 64)
    config = ropeserve.RopeConfig(head_dim=64, max_len=64, axial=ropeserve.AxialRope.sam2(64))
    positions = np.array([[0.5, 1.5, 2.5], [0.25, 0.25, 3.0]])
    scores = client.attention_scores(q, k, config=config, q_fractional_positions=positions,
                                     k_start_pos=1).scores
    assert scores.shape == (1, 2, 3, 4)
    # Causal masks by sequence index: key 1 + j is hidden from query i when 1 + j > i.
    causal = client.attention_scores(q, k, config=config, q_fractional_positions=positions,
                                     k_start_pos=1, causal=True).scores
    hidden = np.arange(4)[None, :] + 1 > np.arange(3)[:, None]
    assert np.isneginf(causal[:, :, hidden]).all()
    np.testing.assert_allclose(causal[:, :, ~hidden], scores[:, :, ~hidden], rtol=1e-6, atol=1e-6)
    with pytest.raises(ropeserve.InvalidArgument, match="both set without causal"):
        client.attention_scores(q, k, config=config, q_fractional_positions=positions,
                                q_start_pos=2)


def test_transformers5_token_positions(client):
    config_json = '{"model_type": "qwen2_vl", "vision_config": {"spatial_merge_size": 2}}'
    ids = np.array([[1, 151652] + [151656] * 12 + [151653, 2]])  # a video of three 2 x 2 frames
    source = dict(input_ids=ids, hf_config=config_json, video_grid_thw=[[3, 4, 4]])
    v5 = client.build_positions(ropeserve.TokenPositions(**source, transformers_version=5))
    v4 = client.build_positions(ropeserve.TokenPositions(**source))
    assert v5.positions[0, 0, -3:].tolist() == [4, 4, 5] and v5.rope_deltas.tolist() == [-10]
    assert v4.positions[0, 0, -3:].tolist() == [4, 5, 6] and v4.rope_deltas.tolist() == [-9]
    with pytest.raises(ValueError, match="transformers_version is 3"):
        client.build_positions(ropeserve.TokenPositions(**source, transformers_version=3))


def test_errors_name_the_field(client):
    with pytest.raises(ropeserve.InvalidArgument, match=r"grids\[0\].size\[1\] is 0"):
        client.build_positions([ropeserve.Grid((2, 0))])
    bad = ropeserve.RopeConfig(head_dim=128, max_len=64, axial=ropeserve.AxialRope((16, 56)))
    with pytest.raises(ropeserve.InvalidArgument, match=r"must sum to rotary_dim 128"):
        client.resolve(bad)
    with pytest.raises(TypeError, match="TokenPositions or a list of ropeserve.Grid"):
        client.build_positions("Flux")


def test_aio_build_positions(server):
    async def run():
        async with ropeserve.aio.Client(server.address) as c:
            return await c.build_positions([ropeserve.Grid((2,), start=(3,))])
    assert asyncio.run(run()).positions.tolist() == [[3, 4]]


def test_diffusion_drop_ins_refuse_wrong_inputs(client):
    pytest.importorskip("torch")
    from ropeserve.diffusion import RemoteEmbedND, apply_rope
    with pytest.raises(ValueError, match="sums to 120, not dim 128"):
        RemoteEmbedND(client, 128, 10000, [16, 48, 56])
    with pytest.raises(TypeError, match="what RemoteEmbedND returns"):
        apply_rope(None, None, object())
