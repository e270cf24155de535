"""The config.json defaults rule of every client, on the Python side.

RopeConfig.from_hf takes the layout that transformers' modeling code uses for
the config's model_type (an explicit rope_interleave key wins) and max_len
from max_position_embeddings (top level, else text_config); both can be
given instead. The C++ clients hold the same model_type table
(client/hf_config_defaults.cc): this test reads it from the source and
compares, and tests/e2e/hf_models_test.py checks ropectl's printed defaults
on the published configs.
"""

import os
import re

import pytest

import ropeserve
from ropeserve.config import _INTERLEAVED_MODEL_TYPES, hf_layout

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hf_configs")


def cpp_table():
    with open(os.path.join(ROOT, "client", "hf_config_defaults.cc"), encoding="utf-8") as f:
        text = f.read()
    block = text.split("// BEGIN interleaved model types", 1)[1].split("// END interleaved model types", 1)[0]
    return set(re.findall(r'"([a-z0-9_]+)"', block))


def test_the_python_and_cpp_tables_are_equal():
    assert cpp_table() == set(_INTERLEAVED_MODEL_TYPES)


@pytest.mark.parametrize("model_type,layout", [
    ("llama", "half"), ("qwen3", "half"), ("mistral", "half"), ("gpt_neox", "half"),
    ("gemma3_text", "half"), ("phi3", "half"), ("gpt_oss", "half"), ("", "half"),
    ("gptj", "interleaved"), ("glm4", "interleaved"), ("deepseek_v3", "interleaved"),
    ("llama4", "interleaved"), ("cohere", "interleaved"),
])
def test_layout_by_model_type(model_type, layout):
    config = ropeserve.RopeConfig.from_hf({"model_type": model_type, "max_position_embeddings": 64})
    assert config.layout.value == layout


def test_rope_interleave_wins_and_text_config_is_read():
    layout, why = hf_layout({"model_type": "deepseek_v3", "rope_interleave": False})
    assert layout is ropeserve.Layout.HALF and why == "rope_interleave false"
    config = ropeserve.RopeConfig.from_hf({"text_config": {"model_type": "llama4_text",
                                                           "max_position_embeddings": 10485760}})
    assert config.layout is ropeserve.Layout.INTERLEAVED and config.max_len == 10485760


def test_given_values_override_the_defaults():
    path = os.path.join(FIXTURES, "Llama-3.1-8B-Instruct.json")
    config = ropeserve.RopeConfig.from_hf(path)
    assert (config.layout.value, config.max_len) == ("half", 131072)
    config = ropeserve.RopeConfig.from_hf(path, max_len=4096, layout="interleaved")
    assert (config.layout.value, config.max_len) == ("interleaved", 4096)


def test_a_model_directory_is_read_and_missing_max_len_is_named(tmp_path):
    with open(os.path.join(FIXTURES, "Qwen3-8B.json"), encoding="utf-8") as f:
        (tmp_path / "config.json").write_text(f.read())
    assert ropeserve.RopeConfig.from_hf(str(tmp_path)).max_len == 40960
    with pytest.raises(ValueError, match="no max_position_embeddings: pass max_len="):
        ropeserve.RopeConfig.from_hf({"model_type": "llama", "rope_theta": 10000.0})


def test_repr_names_the_json_by_size_and_model_type():
    config = ropeserve.RopeConfig.from_hf(os.path.join(FIXTURES, "DeepSeek-V3.json"))
    assert repr(config) == ("RopeConfig(head_dim=0, max_len=163840, layout=interleaved, "
                            "hf_config_json=<%d bytes, model_type deepseek_v3>)"
                            % len(config.hf_config_json.encode()))
