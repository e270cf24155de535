#!/usr/bin/env python3
"""tritonclient's gRPC client against ropeserve (run by triton_clients_test.py
in a venv that has tritonclient[grpc]).

Every call goes through tritonclient.grpc.InferenceServerClient as a Triton
user writes it; results are compared bit for bit with the rope.v1 RPCs
(stubs of the ropeserve package on PYTHONPATH), and system shared memory
goes through tritonclient.utils.shared_memory. Exit status 0: pass; an
AssertionError or a client exception otherwise.
"""

import argparse
import os
import queue
import sys

import grpc
import numpy as np
import tritonclient.grpc as triton
import tritonclient.utils.shared_memory as triton_shm
from tritonclient.utils import InferenceServerException

from ropeserve.proto import rope_pb2 as rp
from ropeserve.proto import rope_pb2_grpc

DEADLINE = 20


def v1_tensor(dtype, array):
    return rp.Tensor(dtype=dtype, shape=list(array.shape), data=array.tobytes())


def rotate_config(client_params):
    return rp.RopeConfig(theta=float(client_params["theta"]), head_dim=client_params["head_dim"],
                         max_len=client_params["max_len"], layout=rp.HALF)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--llama_config", required=True,
                        help="the config.json of the repository's llama models")
    parser.add_argument("--deepseek_config", required=True,
                        help="the config.json of the repository's deepseek-v3 model")
    args = parser.parse_args()
    client = triton.InferenceServerClient(url=args.target)
    rope = rope_pb2_grpc.RopeServiceStub(grpc.insecure_channel(args.target))

    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("rotate") and client.is_model_ready("llama")
    assert not client.is_model_ready("gpt-9")
    metadata = client.get_server_metadata()
    assert metadata.name == "ropeserve", metadata
    model = client.get_model_metadata("llama", as_json=True)
    assert [i["name"] for i in model["inputs"]] == ["q", "k", "positions"], model
    config = client.get_model_config("llama", as_json=True)["config"]
    assert config["input"][0]["dims"] == ["-1", "-1", "-1", "128"], config
    index = client.get_model_repository_index(as_json=True)
    assert {m["name"] for m in index["models"]} == {"attention", "deepseek-v3", "llama",
                                                     "llama-attention", "rotate"}, index
    try:
        client.get_model_metadata("gpt-9")
        raise AssertionError("unknown model answered")
    except InferenceServerException as error:
        assert "Request for unknown model: 'gpt-9' is not found" in error.message(), error

    # Built-in rotate, float32, q and k, explicit positions.
    rng = np.random.default_rng(1)
    q = rng.uniform(-2, 2, size=(2, 3, 8, 64)).astype(np.float32)
    k = rng.uniform(-2, 2, size=(2, 3, 2, 64)).astype(np.float32)
    positions = np.array([[5, 6, 7], [100, 0, 4095]], dtype=np.int64)
    params = {"theta": "500000", "head_dim": 64, "max_len": 8192, "layout": "half"}
    inputs = [triton.InferInput("q", q.shape, "FP32"), triton.InferInput("k", k.shape, "FP32"),
              triton.InferInput("positions", positions.shape, "INT64")]
    for tensor, array in zip(inputs, (q, k, positions)):
        tensor.set_data_from_numpy(array)
    outputs = [triton.InferRequestedOutput("q_out"), triton.InferRequestedOutput("k_out")]
    result = client.infer("rotate", inputs, outputs=outputs, parameters=params, request_id="t1",
                          client_timeout=DEADLINE)
    want = rope.Rotate(rp.RotateRequest(config=rotate_config(params), q=v1_tensor(rp.FLOAT32, q),
                                        k=v1_tensor(rp.FLOAT32, k),
                                        positions=positions.ravel().tolist()), timeout=DEADLINE)
    assert result.get_response().id == "t1"
    assert result.as_numpy("q_out").tobytes() == want.q.data, "q_out differs from Rotate"
    assert result.as_numpy("k_out").tobytes() == want.k.data, "k_out differs from Rotate"
    print("ok    tritonclient infer rotate == rope.v1 Rotate (FP32, q, k, positions)")

    # A repository model, float16, start_pos.
    q16 = rng.uniform(-2, 2, size=(1, 4, 32, 128)).astype(np.float16)
    tensor = triton.InferInput("q", q16.shape, "FP16")
    tensor.set_data_from_numpy(q16)
    result = client.infer("llama", [tensor], parameters={"start_pos": 1000},
                          client_timeout=DEADLINE)
    with open(args.llama_config) as f:
        llama_json = f.read()
    want = rope.Rotate(rp.RotateRequest(
        config=rp.RopeConfig(hf_config_json=llama_json, max_len=8192, layout=rp.HALF),
        q=v1_tensor(rp.FLOAT16, q16), start_pos=1000), timeout=DEADLINE)
    assert result.as_numpy("q_out").tobytes() == want.q.data
    print("ok    tritonclient infer llama (repository, FP16) == rope.v1 Rotate (hf_config_json)")

    # DeepSeek-V3's published config.json as a repository model: served at
    # the rope width (qk_rope_head_dim 64), paired as DeepSeek pairs
    # (neighbours), its YaRN, max_position_embeddings 163840.
    model = client.get_model_metadata("deepseek-v3", as_json=True)
    assert model["inputs"][0]["shape"][-1] == "64", model
    qd = rng.uniform(-2, 2, size=(1, 4, 16, 64)).astype(np.float16)
    pd = np.array([0, 4095, 4096, 163839], dtype=np.int64)
    inputs = [triton.InferInput("q", qd.shape, "FP16"),
              triton.InferInput("positions", pd.shape, "INT64")]
    inputs[0].set_data_from_numpy(qd)
    inputs[1].set_data_from_numpy(pd)
    result = client.infer("deepseek-v3", inputs, client_timeout=DEADLINE)
    with open(args.deepseek_config) as f:
        deepseek_json = f.read()
    want = rope.Rotate(rp.RotateRequest(
        config=rp.RopeConfig(hf_config_json=deepseek_json, max_len=163840, layout=rp.INTERLEAVED),
        q=v1_tensor(rp.FLOAT16, qd), positions=pd.tolist()), timeout=DEADLINE)
    assert result.as_numpy("q_out").tobytes() == want.q.data
    print("ok    tritonclient infer deepseek-v3 (repository, rope width 64) == rope.v1 Rotate")

    # The serving engines' variants as parameters of the built-in model: an
    # MLA-like rotary_offset, HunYuan's alpha, float8 outputs (UINT8 codes).
    qv = rng.uniform(-2, 2, size=(1, 3, 3, 48)).astype(np.float32)
    kv = rng.uniform(-2, 2, size=(1, 3, 2, 48)).astype(np.float32)
    inputs = [triton.InferInput("q", qv.shape, "FP32"), triton.InferInput("k", kv.shape, "FP32")]
    inputs[0].set_data_from_numpy(qv)
    inputs[1].set_data_from_numpy(kv)
    variant = {"theta": "10000", "head_dim": 48, "max_len": 4096, "layout": "half",
               "rotary_offset": 32, "rope_scaling": '{"type": "dynamic", "alpha": 1000}',
               "output_dtype": "FLOAT8_E4M3FN", "output_scale": 8.0, "k_output_scale": 0.5,
               "start_pos": 4000}
    result = client.infer("rotate", inputs, parameters=variant, client_timeout=DEADLINE)
    want = rope.Rotate(rp.RotateRequest(
        config=rp.RopeConfig(theta=10000, head_dim=48, max_len=4096, layout=rp.HALF,
                             rotary_offset=32,
                             dynamic_ntk_alpha=rp.DynamicNtkAlphaScaling(alpha=1000)),
        q=v1_tensor(rp.FLOAT32, qv), k=v1_tensor(rp.FLOAT32, kv), start_pos=4000,
        output_dtype=rp.FLOAT8_E4M3FN, output_scale=8, k_output_scale=0.5), timeout=DEADLINE)
    q8 = result.as_numpy("q_out")
    assert q8.dtype == np.uint8 and q8.shape == (1, 3, 3, 48), (q8.dtype, q8.shape)
    assert q8.tobytes() == want.q.data and result.as_numpy("k_out").tobytes() == want.k.data
    output = result.get_output("q_out")
    assert output.parameters["output_dtype"].string_param == "FLOAT8_E4M3FN", output
    print("ok    tritonclient infer rotate with rotary_offset, alpha, float8 == rope.v1 Rotate")

    # Attention: scores and output.
    qa = rng.uniform(-1, 1, size=(1, 4, 8, 128)).astype(np.float32)
    ka = rng.uniform(-1, 1, size=(1, 6, 2, 128)).astype(np.float32)
    va = rng.uniform(-1, 1, size=(1, 6, 2, 32)).astype(np.float32)
    inputs = []
    for name, array in (("q", qa), ("k", ka), ("v", va)):
        inputs.append(triton.InferInput(name, array.shape, "FP32"))
        inputs[-1].set_data_from_numpy(array)
    result = client.infer("llama-attention", inputs,
                          parameters={"causal": True, "softmax": True, "q_start_pos": 2},
                          client_timeout=DEADLINE)
    want = rope.AttentionScores(rp.AttentionScoresRequest(
        config=rp.RopeConfig(hf_config_json=llama_json, max_len=8192, layout=rp.HALF),
        q=v1_tensor(rp.FLOAT32, qa), k=v1_tensor(rp.FLOAT32, ka), v=v1_tensor(rp.FLOAT32, va),
        causal=True, softmax=True, q_start_pos=2), timeout=DEADLINE)
    assert result.as_numpy("scores").tobytes() == want.scores.data
    assert result.as_numpy("output").tobytes() == want.output.data
    assert result.as_numpy("scores").shape == (1, 8, 4, 6)
    print("ok    tritonclient infer llama-attention == rope.v1 AttentionScores")

    # Attention results beyond the scores, asked for by output name, with a
    # sliding window and softcap as parameters and sinks as a tensor.
    sinks = np.array([0.5, -1.0, 0.25, 0.0, 1.0, -0.5, 2.0, 0.125], dtype=np.float32)
    inputs = []
    for name, array in (("q", qa), ("k", ka), ("v", va), ("sinks", sinks)):
        inputs.append(triton.InferInput(name, array.shape, "FP32"))
        inputs[-1].set_data_from_numpy(array)
    asked = [triton.InferRequestedOutput(name) for name in ("output", "lse", "top_k_indices")]
    result = client.infer("llama-attention", inputs, outputs=asked,
                          parameters={"causal": True, "window_left": 2, "softcap": 30.0,
                                      "top_k": 2},
                          client_timeout=DEADLINE)
    want = rope.AttentionScores(rp.AttentionScoresRequest(
        config=rp.RopeConfig(hf_config_json=llama_json, max_len=8192, layout=rp.HALF),
        q=v1_tensor(rp.FLOAT32, qa), k=v1_tensor(rp.FLOAT32, ka), v=v1_tensor(rp.FLOAT32, va),
        causal=True, window_left=2, softcap=30.0, sinks=sinks.tolist(), top_k=2,
        results=[rp.OUTPUT, rp.LSE, rp.TOP_K]), timeout=DEADLINE)
    lse = result.as_numpy("lse")
    assert lse.dtype == np.float32 and lse.shape == (1, 8, 4), (lse.dtype, lse.shape)
    assert lse.tobytes() == want.lse.data
    assert result.as_numpy("output").tobytes() == want.output.data
    indices = result.as_numpy("top_k_indices")
    assert indices.dtype == np.int32 and indices.shape == (1, 8, 4, 2), (indices.dtype,
                                                                         indices.shape)
    assert indices.tobytes() == want.top_k_indices.data
    print("ok    tritonclient infer llama-attention lse, top_k_indices == rope.v1 AttentionScores")

    # Errors as Triton gives them.
    bad = triton.InferInput("q", q.shape, "INT32")
    bad.set_data_from_numpy(q.view(np.int32))
    try:
        client.infer("rotate", [bad], parameters=params, client_timeout=DEADLINE)
        raise AssertionError("INT32 q accepted")
    except InferenceServerException as error:
        assert error.status() == "StatusCode.INVALID_ARGUMENT", error.status()
        assert "inference input 'q' data-type is 'INT32'" in error.message(), error.message()
    print("ok    tritonclient errors")

    # Streaming: responses in order through the callback.
    responses = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    for i in range(3):
        tensor = triton.InferInput("q", q.shape, "FP32")
        tensor.set_data_from_numpy(q)
        client.async_stream_infer("rotate", [tensor], request_id="s%d" % i,
                                  parameters=dict(params, start_pos=i))
    got = [responses.get(timeout=DEADLINE) for _ in range(3)]
    client.stop_stream()
    assert [r.get_response().id for r, e in got] == ["s0", "s1", "s2"], got
    assert all(e is None for r, e in got)
    print("ok    tritonclient stream")

    # System shared memory through tritonclient's own utilities.
    client.unregister_system_shared_memory()
    handle = triton_shm.create_shared_memory_region("rope_io", "/rope_kserve_io", 2 * q.nbytes)
    try:
        triton_shm.set_shared_memory_region(handle, [q])
        # tritonclient's utility only sizes the object (ftruncate); ropeserve
        # would allocate the sparse pages itself at registration
        # (docs/operations.md, "Shared memory"), but allocating them here, as
        # ropeserve's own clients do, costs the server nothing.
        fd = os.open("/dev/shm/rope_kserve_io", os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, 2 * q.nbytes)
        finally:
            os.close(fd)
        client.register_system_shared_memory("rope_io", "/rope_kserve_io", 2 * q.nbytes)
        status = client.get_system_shared_memory_status(as_json=True)
        assert status["regions"]["rope_io"]["byte_size"] == str(2 * q.nbytes), status
        tensor = triton.InferInput("q", q.shape, "FP32")
        tensor.set_shared_memory("rope_io", q.nbytes)
        out = triton.InferRequestedOutput("q_out")
        out.set_shared_memory("rope_io", q.nbytes, offset=q.nbytes)
        client.infer("rotate", [tensor], outputs=[out], parameters=dict(params, start_pos=7),
                     client_timeout=DEADLINE)
        rotated = triton_shm.get_contents_as_numpy(handle, np.float32, list(q.shape),
                                                   offset=q.nbytes)
        want = rope.Rotate(rp.RotateRequest(config=rotate_config(params),
                                            q=v1_tensor(rp.FLOAT32, q), start_pos=7),
                           timeout=DEADLINE)
        assert rotated.tobytes() == want.q.data, "q_out in shared memory differs from Rotate"
        assert triton_shm.get_contents_as_numpy(handle, np.float32, list(q.shape)).tobytes() == \
            q.tobytes(), "the input region changed"
        client.unregister_system_shared_memory("rope_io")
        assert not client.get_system_shared_memory_status(as_json=True).get("regions")
    finally:
        triton_shm.destroy_shared_memory_region(handle)
    print("ok    tritonclient system shared memory round trip")

    stats = client.get_inference_statistics("rotate", as_json=True)
    entry = stats["model_stats"][0]
    assert entry["name"] == "rotate" and int(entry["inference_count"]) >= 5, stats
    print("ok    tritonclient statistics: %s inferences of rotate" % entry["inference_count"])
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
