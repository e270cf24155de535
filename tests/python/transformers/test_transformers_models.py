"""ropeserve.torch on transformers models: a tiny randomly initialised Llama (transformers'
own LlamaForCausalLM) and Qwen3 (tiny_qwen3: transformers' Qwen3 restated on 4.49's Qwen2
classes, since the Qwen3 of transformers needs torch 2), built from their configs.

Each model's logits with ropeserve are compared with the model's own: with
RemoteRotaryEmbedding in place of the rotary module (the server's cos/sin
table), and with patch_model (q and k rotated by the server in every
attention layer). The service computes angles in double and rounds once;
transformers computes them in float32, so logits agree to float32 rounding
(positions here stay below 64), and greedy generation picks the same tokens.
"""

import pytest
import torch

import ropeserve
from ropeserve.torch import RemoteRotaryEmbedding, patch_model

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import tiny_qwen3  # noqa: E402

TOLERANCE = 2e-5  # logits of order 0.1-1: float32 rounding of cos/sin through two layers


def tiny_llama():
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         rope_theta=500000.0, attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def tiny_qwen():
    config = tiny_qwen3.Qwen3Config(vocab_size=96, hidden_size=64, intermediate_size=128,
                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=32, max_position_embeddings=256, rope_theta=1000000.0,
                                    attn_implementation="eager")
    torch.manual_seed(1)
    return tiny_qwen3.Qwen3ForCausalLM(config).eval()


MODELS = {"llama": tiny_llama, "qwen3": tiny_qwen}
IDS = torch.tensor([[5, 17, 3, 90, 44, 2, 61, 8, 33, 70, 12, 1]])


def logits(model, ids=IDS, **kwargs):
    with torch.no_grad():
        return model(ids, **kwargs).logits


def greedy(model, ids, steps):
    """Greedy decoding with the KV cache: the prompt once, then one token per call at
    positions len(prompt), len(prompt) + 1, ... (model.generate itself does not run under
    torch 1.13 on Python 3.11: torch.distributed's dataclasses fail to import)."""
    with torch.no_grad():
        out = model(ids, use_cache=True)
        tokens = [int(out.logits[0, -1].argmax())]
        for _ in range(steps - 1):
            out = model(torch.tensor([[tokens[-1]]]), past_key_values=out.past_key_values,
                        use_cache=True)
            tokens.append(int(out.logits[0, -1].argmax()))
    return tokens


@pytest.mark.parametrize("name", list(MODELS))
def test_rotary_module_drop_in(client, name):
    model = MODELS[name]()
    want = logits(model)
    config = ropeserve.RopeConfig.from_hf(model.config.to_dict())
    assert config.layout is ropeserve.Layout.HALF  # llama and qwen3 rotate halves
    model.model.rotary_emb = RemoteRotaryEmbedding(client, config)
    got = logits(model)
    assert got.shape == want.shape
    assert float((got - want).abs().max()) < TOLERANCE
    # Padded batch rows with their own positions.
    ids = torch.cat([IDS, IDS.flip(1)])
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    model_ref = MODELS[name]()
    assert float((logits(model, ids, attention_mask=mask)
                  - logits(model_ref, ids, attention_mask=mask)).abs().max()) < TOLERANCE


@pytest.mark.parametrize("name", list(MODELS))
def test_float32_angles_give_the_models_own_logits_bit_for_bit(client, name):
    # angle_precision "float32" is transformers' own float32 cos/sin (on an AVX2 CPU, as
    # torch's kernels compute them there): the model's numbers exactly.
    if "CPU capability usage: AVX2" not in torch.__config__.show():
        pytest.skip("torch does not run its AVX2 kernels here: cos/sin agree to 1 ulp only")
    model = MODELS[name]()
    want = logits(model)
    config = ropeserve.RopeConfig.from_hf(model.config.to_dict()).replace(angle_precision="float32")
    model.model.rotary_emb = RemoteRotaryEmbedding(client, config)
    assert torch.equal(logits(model), want)


@pytest.mark.parametrize("name", list(MODELS))
def test_patch_model_rotates_in_every_attention_layer(client, name):
    model = MODELS[name]()
    want = logits(model)
    calls = []
    patched = patch_model(model, client)
    real_rotate = patched.rope.rotate

    def counting_rotate(*args, **kwargs):
        calls.append(args[0].shape)
        return real_rotate(*args, **kwargs)

    patched.rope.rotate = counting_rotate
    got = logits(model)
    assert len(calls) == model.config.num_hidden_layers  # one Rotate per layer and forward
    assert float((got - want).abs().max()) < TOLERANCE
    assert "PatchedModel(" in repr(patched) and len(repr(patched)) < 300
    # Decoding with the KV cache: the same greedy tokens as the model itself.
    calls.clear()
    tokens = greedy(model, IDS, 6)
    assert len(calls) == 6 * model.config.num_hidden_layers
    patched.unpatch()
    assert torch.equal(logits(model), want)  # unpatched: the model's own numbers again
    assert tokens == greedy(model, IDS, 6)


def test_a_model_of_the_same_class_beside_a_patched_one_is_unchanged(client):
    patched_model, plain = tiny_llama(), tiny_llama()
    want = logits(plain)
    patch_model(patched_model, client)
    assert torch.equal(logits(plain), want)


def test_gradients_flow_through_the_patched_model(client):
    model = tiny_llama()
    ids = IDS[:, :6]
    with torch.enable_grad():
        loss = model(ids, labels=ids).loss
        loss.backward()
        want = model.model.layers[0].self_attn.q_proj.weight.grad.clone()
        model.zero_grad()
        patch_model(model, client)
        model(ids, labels=ids).loss.backward()
        got = model.model.layers[0].self_attn.q_proj.weight.grad
    assert float((got - want).abs().max()) < 1e-4 * (1 + float(want.abs().max()))


def test_patch_model_refuses_models_it_cannot_patch(client):
    with pytest.raises(ValueError, match="has 0 rotary modules"):
        patch_model(torch.nn.Linear(2, 2), client, config=ropeserve.RopeConfig(head_dim=2, max_len=4))
