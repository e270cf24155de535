"""RopeConfig over rope.v1.RopeConfig: every scaling variant on the wire and in GetTable."""

import dataclasses
import json

import numpy as np
import pytest

import ropeserve
import rope_reference as ref
from ropeserve import config as config_module
from ropeserve.proto import rope_pb2 as pb

LONG = [1.0 + 0.5 * i for i in range(8)]
SHORT = [1.0 + 0.1 * i for i in range(8)]

# (name, RopeConfig, reference kind, reference parameters)
SCALED = [
    ("none", ropeserve.RopeConfig(head_dim=16, max_len=64, theta=10000.0), "none", {}),
    ("linear", ropeserve.RopeConfig(head_dim=16, max_len=64, scaling=ropeserve.LinearScaling(4.0)),
     "linear", dict(factor=4.0)),
    ("dynamic", ropeserve.RopeConfig(head_dim=16, max_len=256, scaling=ropeserve.DynamicNtkScaling(
        factor=2.0, original_max_position_embeddings=64)),
     "dynamic", dict(factor=2.0, original_max_position_embeddings=64)),
    ("yarn", ropeserve.RopeConfig(head_dim=64, max_len=1024, scaling=ropeserve.YarnScaling(
        factor=4.0, original_max_position_embeddings=256)),
     "yarn", dict(factor=4.0, original_max_position_embeddings=256)),
    ("yarn-mscale", ropeserve.RopeConfig(head_dim=64, max_len=1024, theta=10000.0, scaling=ropeserve.YarnScaling(
        factor=40.0, original_max_position_embeddings=128, beta_fast=16.0, beta_slow=2.0, mscale=1.0,
        mscale_all_dim=0.707)),
     "yarn", dict(factor=40.0, original_max_position_embeddings=128, beta_fast=16.0, beta_slow=2.0,
                  mscale=1.0, mscale_all_dim=0.707)),
    ("llama3", ropeserve.RopeConfig(head_dim=128, max_len=16384, theta=500000.0,
                                    scaling=ropeserve.Llama3Scaling()),
     "llama3", {}),
    ("longrope", ropeserve.RopeConfig(head_dim=16, max_len=512, scaling=ropeserve.LongRopeScaling(
        short_factor=SHORT, long_factor=LONG, original_max_position_embeddings=64)),
     "longrope", dict(short_factor=SHORT, long_factor=LONG, original_max_position_embeddings=64)),
    ("proportional", ropeserve.RopeConfig(head_dim=16, max_len=64, theta=1.0e6, layout="half",
                                          scaling=ropeserve.ProportionalScaling(rotated_pairs=2, factor=2.0)),
     "proportional", dict(rotated_pairs=2, factor=2.0)),
    ("partial", ropeserve.RopeConfig(head_dim=16, rotary_dim=8, max_len=64, theta=2.0e6), "none", {}),
    ("dynamic_alpha", ropeserve.RopeConfig(head_dim=16, max_len=64, layout="half",
                                           scaling=ropeserve.DynamicNtkAlphaScaling(alpha=1000.0)),
     "dynamic_alpha", dict(alpha=1000.0)),
    ("ntk", ropeserve.RopeConfig(head_dim=16, max_len=64, scaling=ropeserve.NtkScaling(factor=4.0)),
     "ntk", dict(factor=4.0)),
    ("ntk-mixed_b", ropeserve.RopeConfig(head_dim=16, max_len=64,
                                         scaling=ropeserve.NtkScaling(factor=4.0, mixed_b=0.5)),
     "ntk", dict(factor=4.0, mixed_b=0.5)),
    ("deepseek_yarn", ropeserve.RopeConfig(head_dim=64, max_len=1024, scaling=ropeserve.DeepseekYarnScaling(
        factor=40.0, original_max_position_embeddings=128, mscale=0.707, attn_factor=1.5)),
     "deepseek_yarn", dict(factor=40.0, original_max_position_embeddings=128, mscale=0.707, attn_factor=1.5)),
    ("mla-offset", ropeserve.RopeConfig(head_dim=24, rotary_dim=8, rotary_offset=16, max_len=64), "none", {}),
]


@pytest.mark.parametrize("name,config,kind,params", SCALED, ids=[s[0] for s in SCALED])
def test_table_matches_reference_for_every_scaling(client, name, config, kind, params):
    start, count = config.max_len - 10, 10
    table = client.table(config, start, count)
    theta = config.theta or 10000.0
    rotary_dim = config.rotary_dim or config.head_dim
    inv, attention = ref.inv_freq_and_attention(kind, theta, rotary_dim, max_len=config.max_len,
                                                seq_len=start + count, **params)
    np.testing.assert_allclose(table.inv_freq, inv, rtol=1e-12, err_msg=name)
    assert table.attention_factor == pytest.approx(attention, rel=1e-12)
    assert table.start == start
    assert table.cos.dtype == np.float32 and table.cos.shape == (count, rotary_dim // 2)
    angle = np.outer(start + np.arange(count), inv)
    ref.assert_close(table.cos, attention * np.cos(angle), "float32", absolute=3e-7, what=name + " cos")
    ref.assert_close(table.sin, attention * np.sin(angle), "float32", absolute=3e-7, what=name + " sin")


@pytest.mark.parametrize("name,config,kind,params", SCALED, ids=[s[0] for s in SCALED])
def test_config_round_trips_through_the_proto(name, config, kind, params):
    message = config.to_proto()
    assert isinstance(message, pb.RopeConfig)
    assert ropeserve.RopeConfig.from_proto(message) == config
    assert pb.RopeConfig.FromString(message.SerializeToString()) == message
    assert hash(ropeserve.RopeConfig.from_proto(message)) == hash(config)


def test_proto_fields_reach_the_wire_by_name():
    config = ropeserve.RopeConfig(head_dim=64, max_len=4096, theta=1.0e6, rotary_dim=32, layout="HALF",
                                  scaling=ropeserve.YarnScaling(factor=8.0, original_max_position_embeddings=4096,
                                                                attention_factor=1.25))
    message = config.to_proto()
    assert (message.head_dim, message.max_len, message.theta, message.rotary_dim) == (64, 4096, 1.0e6, 32)
    assert message.layout == pb.HALF
    assert message.WhichOneof("scaling") == "yarn"
    assert (message.yarn.factor, message.yarn.original_max_position_embeddings) == (8.0, 4096)
    assert (message.yarn.beta_fast, message.yarn.beta_slow, message.yarn.attention_factor) == (32.0, 1.0, 1.25)
    assert message.yarn.mscale == 0.0  # None -> 0 -> the server's rule
    assert ropeserve.RopeConfig(head_dim=8, max_len=8).to_proto().theta == 0.0  # None -> server default


def test_every_scaling_message_has_a_dataclass_with_the_same_fields():
    oneof = pb.RopeConfig.DESCRIPTOR.oneofs_by_name["scaling"]
    by_oneof = {cls._ONEOF: cls for cls in config_module.SCALINGS}
    assert set(by_oneof) == {f.name for f in oneof.fields}
    for field in oneof.fields:
        cls = by_oneof[field.name]
        assert cls.__name__ == field.message_type.name
        assert {f.name for f in dataclasses.fields(cls)} == {f.name for f in field.message_type.fields}, cls


def test_every_rope_config_field_is_a_dataclass_field():
    names = {f.name for f in dataclasses.fields(ropeserve.RopeConfig)}
    for field in pb.RopeConfig.DESCRIPTOR.fields:
        assert field.name in names or field.containing_oneof is not None, field.name


def test_new_fields_round_trip_and_absent_ones_stay_unset():
    config = ropeserve.RopeConfig(head_dim=0, max_len=64, hf_config_json="{}", hf_layer_index=0)
    message = config.to_proto()
    assert message.HasField("hf_layer_index") and message.hf_layer_index == 0
    assert ropeserve.RopeConfig.from_proto(message) == config
    nope = ropeserve.RopeConfig(head_dim=8, max_len=64, no_rope=ropeserve.NoRope())
    assert nope.to_proto().HasField("no_rope")
    assert ropeserve.RopeConfig.from_proto(nope.to_proto()) == nope
    tuned = ropeserve.RopeConfig(head_dim=8, max_len=64, no_rope=ropeserve.NoRope(8192.0, 0.1),
                                 mrope=ropeserve.Mrope((2, 1, 1)), mrope_ernie_3d=True, rotary_offset=0)
    message = tuned.to_proto()
    assert (message.no_rope.floor_scale, message.no_rope.attn_scale) == (8192.0, 0.1)
    assert message.mrope_ernie_3d
    assert ropeserve.RopeConfig.from_proto(message) == tuned.replace(rotary_offset=None)
    plain = ropeserve.RopeConfig(head_dim=8, max_len=8).to_proto()
    assert not plain.HasField("hf_layer_index") and not plain.HasField("no_rope")
    assert plain.rotary_offset == 0 and not plain.mrope_ernie_3d


def test_layouts_and_bad_config_values():
    assert ropeserve.RopeConfig(head_dim=8, max_len=8, layout="half").layout is ropeserve.Layout.HALF
    assert ropeserve.RopeConfig(head_dim=8, max_len=8, layout=pb.HALF).layout is ropeserve.Layout.HALF
    with pytest.raises(ValueError, match="layout is 'diagonal'"):
        ropeserve.RopeConfig(head_dim=8, max_len=8, layout="diagonal")
    with pytest.raises(TypeError, match="RopeConfig.scaling is a dict"):
        ropeserve.RopeConfig(head_dim=8, max_len=8, scaling={"factor": 2.0})
    with pytest.raises(ValueError, match="RopeConfig.head_dim is -8"):
        ropeserve.RopeConfig(head_dim=-8, max_len=8).to_proto()
    with pytest.raises(ValueError, match="RopeConfig.scaling.original_max_position_embeddings is 4096.5"):
        ropeserve.RopeConfig(head_dim=8, max_len=8, scaling=ropeserve.DynamicNtkScaling(
            2.0, 4096.5)).to_proto()


LLAMA_31 = {"rope_theta": 500000.0, "hidden_size": 4096, "num_attention_heads": 32,
            "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}


@pytest.mark.skipif(ropeserve.HAS_HF_CONFIG, reason="rope.proto has hf_config_json")
def test_from_hf_says_the_proto_lacks_hf_config_json():
    with pytest.raises(ropeserve.Unimplemented, match="without RopeConfig.hf_config_json") as e:
        ropeserve.RopeConfig.from_hf(LLAMA_31)
    assert isinstance(e.value, NotImplementedError)
    with pytest.raises(ropeserve.Unimplemented):
        ropeserve.RopeConfig(head_dim=0, max_len=8, hf_config_json="{}")


@pytest.mark.skipif(ropeserve.HAS_RESOLVE, reason="rope.proto has ResolveConfig")
def test_resolve_says_the_proto_lacks_resolve_config(client):
    with pytest.raises(ropeserve.Unimplemented, match="without the ResolveConfig RPC"):
        client.resolve(ropeserve.RopeConfig(head_dim=8, max_len=8))


@pytest.mark.skipif(not (ropeserve.HAS_HF_CONFIG and ropeserve.HAS_RESOLVE),
                    reason="rope.proto lacks hf_config_json or ResolveConfig")
def test_from_hf_llama31_is_served_as_the_explicit_llama3_config(client):
    import torch
    hf = ropeserve.RopeConfig.from_hf(LLAMA_31, max_len=16384)
    explicit = ropeserve.RopeConfig(head_dim=128, max_len=16384, theta=500000.0, layout="half",
                                    scaling=ropeserve.Llama3Scaling())
    resolved = client.resolve(hf)
    assert resolved.config.theta == 500000.0 and resolved.config.scaling == explicit.scaling
    q = torch.randn(1, 4, 2, 128, dtype=torch.bfloat16)
    got, _ = client.rotate(q, config=hf, start_pos=9000)
    want, _ = client.rotate(q, config=explicit, start_pos=9000)
    assert torch.equal(got, want)


def test_read_hf_config_from_dict_file_and_directory(tmp_path):
    text, parsed = config_module.read_hf_config(LLAMA_31)
    assert json.loads(text) == LLAMA_31 and parsed is LLAMA_31
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 32768}}))
    for source in (tmp_path, str(tmp_path / "config.json")):
        _, parsed = config_module.read_hf_config(source)
        assert config_module.hf_max_position_embeddings(parsed) == 32768
    assert config_module.hf_max_position_embeddings({"rope_theta": 1.0}) is None
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not JSON"):
        config_module.read_hf_config(tmp_path / "bad.json")
    with pytest.raises(TypeError, match="source is a int"):
        config_module.read_hf_config(3)
