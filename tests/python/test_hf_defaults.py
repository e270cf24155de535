"""The config.json defaults rule of every client, on the Python side.

A client takes the layout and max_len a config.json implies from the
server: ResolveConfig returns ResolvedConfig.hf_layout (the layout
transformers' modeling code for the model_type uses; a rope_interleave key
wins) and max_position_embeddings. Client.from_hf (and RopeConfig.from_hf
with client=) asks it; either value given by the caller wins. Without a
client (or with a server too old to return hf_layout) RopeConfig.from_hf
falls back to the package's copy of the server's table: this test holds
that copy equal to the server's answers, and exercises the fallback path of
a reply without hf_layout.
"""

import asyncio
import os
import re

import pytest

import ropeserve
import ropeserve.aio
from ropeserve import _proto
from ropeserve.config import _INTERLEAVED_MODEL_TYPES, hf_layout

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf_configs")


def fixture(name):
    return os.path.join(FIXTURES, name + ".json")


def server_interleaved_model_types():
    """The server's table (core/engine/hf_config.cc), read from its source."""
    with open(os.path.join(ROOT, "core", "engine", "hf_config.cc"), encoding="utf-8") as f:
        text = f.read()
    block = text.split("kInterleavedModelTypes[] = {", 1)[1].split("};", 1)[0]
    return set(re.findall(r'"([a-z0-9_]+)"', block))


@pytest.mark.parametrize("name,layout,max_len,no_rope", [
    ("Llama-3.1-8B-Instruct", "half", 131072, False),
    ("Qwen2-VL-7B-Instruct", "half", 32768, False),      # M-RoPE
    ("gpt-oss-20b", "half", 131072, False),
    ("DeepSeek-V3", "interleaved", 163840, False),
])
def test_client_from_hf_takes_the_servers_layout_and_max_len(client, name, layout, max_len,
                                                             no_rope):
    config = client.from_hf(fixture(name))
    assert (config.layout.value, config.max_len) == (layout, max_len)
    resolved = client.resolve(config).message
    assert resolved.hf_layout == _proto.pb.Layout.Value(layout.upper())
    assert resolved.max_position_embeddings == max_len
    assert resolved.no_rope == no_rope
    # The server accepts what the defaults made, to the table's last row.
    table = client.table(config, start=max_len - 2, count=2)
    assert table.cos.shape[0] == 2


def test_a_nope_layer_of_llama4_takes_the_servers_defaults_and_rotates_nothing(client):
    import numpy as np
    # Llama 4 Scout: every fourth decoder layer (3, 7, ...) has no rotary embedding.
    config = client.from_hf(fixture("Llama-4-Scout-17B-16E-Instruct"), layer_index=3)
    assert (config.layout.value, config.max_len) == ("interleaved", 10485760)
    resolved = client.resolve(config).message
    assert resolved.no_rope and resolved.layer_type == "full_attention"
    q = np.random.default_rng(3).standard_normal((1, 4, 2, 128)).astype(np.float32)
    out, _ = client.rotate(q, config=config, start_pos=100)
    assert np.array_equal(out, q)
    rope_layer = client.from_hf(fixture("Llama-4-Scout-17B-16E-Instruct"), layer_index=0)
    assert not client.resolve(rope_layer).message.no_rope


def test_given_values_win_and_nothing_is_asked_when_both_are_given(client):
    config = client.from_hf(fixture("Llama-3.1-8B-Instruct"), max_len=4096, layout="interleaved")
    assert (config.layout.value, config.max_len) == ("interleaved", 4096)
    config = client.from_hf(fixture("Llama-3.1-8B-Instruct"), max_len=4096)
    assert (config.layout.value, config.max_len) == ("half", 4096)


def test_the_asyncio_client_takes_the_same_defaults(server):
    async def main():
        async with ropeserve.aio.Client(server.address, deadline=20.0) as aio_client:
            return await aio_client.from_hf(fixture("Qwen3-8B"))
    config = asyncio.run(main())
    assert (config.layout.value, config.max_len) == ("half", 40960)


def test_a_config_without_max_position_embeddings_is_named(client):
    with pytest.raises(ValueError, match="no max_position_embeddings: pass max_len="):
        client.from_hf({"model_type": "llama", "rope_theta": 10000.0, "head_dim": 64})


def test_the_fallback_table_equals_the_servers_answers(client):
    # Every model type either table names, and some that rotate halves.
    model_types = (server_interleaved_model_types() | set(_INTERLEAVED_MODEL_TYPES)
                   | {"llama", "qwen3", "mistral", "gpt_neox", "gemma3_text", "phi3", "gpt_oss",
                      "glm4_moe", ""})
    assert server_interleaved_model_types() == set(_INTERLEAVED_MODEL_TYPES)
    # DeepSeek-V4 needs its whole config (rope groups): its fixture below.
    for model_type in sorted(model_types - {"deepseek_v4"}):
        parsed = {"model_type": model_type, "rope_theta": 10000.0, "head_dim": 64,
                  "max_position_embeddings": 64}
        offline = ropeserve.RopeConfig.from_hf(parsed)
        served = client.from_hf(parsed)
        assert offline.layout is served.layout, model_type
    for name in ("DeepSeek-V4-Flash", "ERNIE-4.5-VL-28B-A3B-PT", "Kimi-K2-Instruct",
                 "gemma-3-12b-it", "pythia-2.8b"):
        offline = ropeserve.RopeConfig.from_hf(fixture(name), layer_index=0)
        served = client.from_hf(fixture(name), layer_index=0)
        assert (offline.layout, offline.max_len) == (served.layout, served.max_len), name
    for parsed in ({"model_type": "deepseek_v3", "rope_interleave": False},
                   {"model_type": "nomic_bert", "rotary_emb_interleaved": True},
                   {"model_type": "gptj", "n_positions": 2048}):
        parsed = dict(parsed, rope_theta=10000.0, head_dim=64, max_position_embeddings=64)
        if "n_positions" in parsed:
            del parsed["max_position_embeddings"]
        offline = ropeserve.RopeConfig.from_hf(parsed)
        served = client.from_hf(parsed)
        assert (offline.layout, offline.max_len) == (served.layout, served.max_len), parsed


def test_a_reply_without_hf_layout_falls_back_to_the_table():
    # A server older than ResolvedConfig.hf_layout answers LAYOUT_UNSPECIFIED.
    text = '{"model_type": "glm4", "max_position_embeddings": 2048}'
    old_reply = _proto.pb.ResolvedConfig()
    config = ropeserve.RopeConfig._from_hf_answer(text, {"model_type": "glm4",
                                                         "max_position_embeddings": 2048},
                                                  None, None, None, old_reply)
    assert (config.layout.value, config.max_len) == ("interleaved", 2048)
    new_reply = _proto.pb.ResolvedConfig(hf_layout=_proto.pb.HALF, max_position_embeddings=99)
    config = ropeserve.RopeConfig._from_hf_answer(text, {}, None, None, None, new_reply)
    assert (config.layout.value, config.max_len) == ("half", 99)


def test_the_offline_fallback_reads_rope_interleave_and_text_config():
    layout, why = hf_layout({"model_type": "deepseek_v3", "rope_interleave": False})
    assert layout is ropeserve.Layout.HALF and why == "rope_interleave false"
    config = ropeserve.RopeConfig.from_hf({"text_config": {"model_type": "llama4_text",
                                                           "max_position_embeddings": 10485760}})
    assert config.layout is ropeserve.Layout.INTERLEAVED and config.max_len == 10485760


def test_a_model_directory_is_read(tmp_path, client):
    with open(fixture("Qwen3-8B"), encoding="utf-8") as f:
        (tmp_path / "config.json").write_text(f.read())
    assert client.from_hf(str(tmp_path)).max_len == 40960
    assert ropeserve.RopeConfig.from_hf(str(tmp_path)).max_len == 40960


def test_repr_names_the_json_by_size_and_model_type(client):
    config = client.from_hf(fixture("DeepSeek-V3"))
    assert repr(config) == ("RopeConfig(head_dim=0, max_len=163840, layout=interleaved, "
                            "hf_config_json=<%d bytes, model_type deepseek_v3>)"
                            % len(config.hf_config_json.encode()))
