"""Every call of inference.GRPCInferenceService through stubs generated from
the project's proto/inference files, against a real ropeserve: ModelInfer
equals the rope.v1 call it stands for bit for bit (and a float64 NumPy
reference), the shared-memory calls round-trip through a real POSIX
shared-memory object, errors carry Triton's codes and name the tensor or
parameter, and the calls are counted in ropeserve's metrics."""

import json
import os
from multiprocessing import shared_memory

import grpc
import numpy as np
import pytest

from inference import grpc_service_pb2 as pb
from inference import model_config_pb2 as mc
from ropeserve.proto import rope_pb2 as rp

DEADLINE = 20
HF_CONFIGS = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hf_configs")


def read_fixture(name):
    with open(os.path.join(HF_CONFIGS, name)) as f:
        return f.read()


def bf16_bytes(x):
    """float32 -> bfloat16 bits (round to nearest even), as raw bytes."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded.tobytes()


def add_input(request, name, datatype, array, raw=None):
    tensor = request.inputs.add()
    tensor.name = name
    tensor.datatype = datatype
    tensor.shape.extend(array.shape)
    request.raw_input_contents.append(raw if raw is not None else array.tobytes())
    return tensor


def output(response, name):
    for i, out in enumerate(response.outputs):
        if out.name == name:
            return out, response.raw_output_contents[i]
    raise AssertionError("no output %r in %s" % (name, [o.name for o in response.outputs]))


def expect_error(call, request, code, text):
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=DEADLINE)
    assert info.value.code() == code, info.value.details()
    assert text in info.value.details(), info.value.details()


def v1_tensor(dtype, array, raw=None):
    t = rp.Tensor(dtype=dtype, shape=list(array.shape))
    t.data = raw if raw is not None else array.tobytes()
    return t


# ---- probes and metadata -------------------------------------------------------------

def test_probes_and_server_metadata(kserve):
    assert kserve.ServerLive(pb.ServerLiveRequest(), timeout=DEADLINE).live
    assert kserve.ServerReady(pb.ServerReadyRequest(), timeout=DEADLINE).ready
    assert kserve.ModelReady(pb.ModelReadyRequest(name="llama"), timeout=DEADLINE).ready
    assert kserve.ModelReady(pb.ModelReadyRequest(name="rotate", version="1"), timeout=DEADLINE).ready
    assert not kserve.ModelReady(pb.ModelReadyRequest(name="gpt"), timeout=DEADLINE).ready
    assert not kserve.ModelReady(pb.ModelReadyRequest(name="rotate", version="2"),
                                 timeout=DEADLINE).ready
    expect_error(kserve.ModelMetadata, pb.ModelMetadataRequest(name="gpt"),
                 grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'gpt' is not found")
    metadata = kserve.ServerMetadata(pb.ServerMetadataRequest(), timeout=DEADLINE)
    assert metadata.name == "ropeserve"
    assert metadata.version
    assert "system_shared_memory" in metadata.extensions


def test_model_metadata_and_config_describe_the_tensors(kserve):
    llama = kserve.ModelMetadata(pb.ModelMetadataRequest(name="llama"), timeout=DEADLINE)
    assert llama.platform == "ropeserve" and list(llama.versions) == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in llama.inputs] == [
        ("q", "FP16", [-1, -1, -1, 128]), ("k", "FP16", [-1, -1, -1, 128]),
        ("positions", "INT64", [-1])]
    assert [t.name for t in llama.outputs] == ["q_out", "k_out"]
    attention = kserve.ModelMetadata(pb.ModelMetadataRequest(name="attention"), timeout=DEADLINE)
    assert [(t.name, t.datatype) for t in attention.outputs] == [
        ("scores", "FP32"), ("output", "FP32"), ("lse", "FP32"), ("top_k_indices", "INT32"),
        ("top_k_probs", "FP32"), ("key_mass", "FP32"), ("score_rows", "FP32")]
    assert [(t.name, t.datatype, list(t.shape)) for t in attention.inputs][3:] == [
        ("sinks", "FP32", [-1]), ("alibi_slopes", "FP32", [-1]), ("q_positions", "INT64", [-1]),
        ("k_positions", "INT64", [-1])]
    config = kserve.ModelConfig(pb.ModelConfigRequest(name="gemma-local"), timeout=DEADLINE).config
    assert config.name == "gemma-local" and config.max_batch_size == 0
    assert config.backend == "ropeserve"
    assert [(i.name, i.data_type, list(i.dims), i.optional) for i in config.input] == [
        ("q", mc.TYPE_FP32, [-1, -1, -1, 256], False), ("k", mc.TYPE_FP32, [-1, -1, -1, 256], False),
        ("v", mc.TYPE_FP32, [-1, -1, -1, -1], True), ("sinks", mc.TYPE_FP32, [-1], True),
        ("alibi_slopes", mc.TYPE_FP32, [-1], True), ("q_positions", mc.TYPE_INT64, [-1], True),
        ("k_positions", mc.TYPE_INT64, [-1], True)]
    assert config.parameters["operation"].string_value == "attention"
    assert config.parameters["hf_layer_type"].string_value == "sliding_attention"
    expect_error(kserve.ModelConfig, pb.ModelConfigRequest(name="llama", version="3"),
                 grpc.StatusCode.NOT_FOUND, "'llama' version 3 is not found")


def test_repository_index_lists_every_model(kserve):
    index = kserve.RepositoryIndex(pb.RepositoryIndexRequest(ready=True), timeout=DEADLINE)
    assert [(m.name, m.version, m.state) for m in index.models] == [
        ("attention", "1", "READY"), ("gemma-local", "1", "READY"), ("llama", "1", "READY"),
        ("rotate", "1", "READY")]


# ---- ModelInfer == rope.v1 ----------------------------------------------------------

@pytest.mark.parametrize("datatype", ["FP32", "FP16", "BF16"])
def test_builtin_rotate_equals_rope_v1_rotate(kserve, rope, datatype):
    rng = np.random.default_rng(3)
    q32 = rng.uniform(-2, 2, size=(2, 5, 4, 64)).astype(np.float32)
    k32 = rng.uniform(-2, 2, size=(2, 5, 2, 64)).astype(np.float32)
    if datatype == "BF16":
        q_raw, k_raw, dtype = bf16_bytes(q32), bf16_bytes(k32), rp.BFLOAT16
    elif datatype == "FP16":
        q_raw, k_raw, dtype = q32.astype(np.float16).tobytes(), k32.astype(np.float16).tobytes(), rp.FLOAT16
    else:
        q_raw, k_raw, dtype = q32.tobytes(), k32.tobytes(), rp.FLOAT32
    positions = np.array([9, 0, 4000, 77, 5, 6, 7, 8, 1, 2], dtype=np.int64)
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

    request = pb.ModelInferRequest(model_name="rotate", id="x1")
    request.parameters["theta"].string_param = "500000"
    request.parameters["head_dim"].int64_param = 64
    request.parameters["rotary_dim"].int64_param = 48
    request.parameters["max_len"].int64_param = 8192
    request.parameters["layout"].string_param = "half"
    request.parameters["rope_scaling"].string_param = json.dumps(scaling)
    request.parameters["inverse"].bool_param = True
    add_input(request, "q", datatype, q32, q_raw)
    add_input(request, "k", datatype, k32, k_raw)
    add_input(request, "positions", "INT64", positions.reshape(2, 5))
    response = kserve.ModelInfer(request, timeout=DEADLINE)

    config = rp.RopeConfig(theta=500000, head_dim=64, rotary_dim=48, max_len=8192, layout=rp.HALF,
                           llama3=rp.Llama3Scaling(factor=8, low_freq_factor=1, high_freq_factor=4,
                                                   original_max_position_embeddings=8192))
    want = rope.Rotate(rp.RotateRequest(config=config, q=v1_tensor(dtype, q32, q_raw),
                                        k=v1_tensor(dtype, k32, k_raw),
                                        positions=positions.tolist(), inverse=True),
                       timeout=DEADLINE)
    assert response.model_name == "rotate" and response.model_version == "1" and response.id == "x1"
    q_out, q_bytes = output(response, "q_out")
    k_out, k_bytes = output(response, "k_out")
    assert (q_out.datatype, list(q_out.shape)) == (datatype, [2, 5, 4, 64])
    assert (k_out.datatype, list(k_out.shape)) == (datatype, [2, 5, 2, 64])
    assert q_bytes == want.q.data
    assert k_bytes == want.k.data


def test_rotate_matches_a_float64_reference(kserve):
    rng = np.random.default_rng(5)
    q = rng.uniform(-1, 1, size=(1, 3, 2, 8)).astype(np.float32)
    request = pb.ModelInferRequest(model_name="rotate")
    request.parameters["head_dim"].int64_param = 8
    request.parameters["max_len"].int64_param = 64
    request.parameters["start_pos"].int64_param = 10
    add_input(request, "q", "FP32", q)
    got = np.frombuffer(kserve.ModelInfer(request, timeout=DEADLINE).raw_output_contents[0],
                        dtype=np.float32).reshape(q.shape)
    inv = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    ang = (10 + np.arange(3))[:, None] * inv[None, :]
    x = q.astype(np.float64)
    want = np.empty_like(x)
    c, s = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]
    want[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    want[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    np.testing.assert_allclose(got, want, atol=2e-6)


def test_repository_rotate_equals_rope_v1_with_its_config_json(kserve, rope):
    rng = np.random.default_rng(8)
    q = rng.uniform(-2, 2, size=(1, 4, 8, 128)).astype(np.float16)
    request = pb.ModelInferRequest(model_name="llama")
    request.parameters["start_pos"].int64_param = 8000
    add_input(request, "q", "FP16", q)
    got = output(kserve.ModelInfer(request, timeout=DEADLINE), "q_out")[1]
    config = rp.RopeConfig(hf_config_json=read_fixture("Llama-3.1-8B-Instruct.json"),
                           max_len=8192, layout=rp.HALF)
    want = rope.Rotate(rp.RotateRequest(config=config, q=v1_tensor(rp.FLOAT16, q), start_pos=8000),
                       timeout=DEADLINE)
    assert got == want.q.data


def test_attention_equals_rope_v1_attention_scores(kserve, rope):
    rng = np.random.default_rng(11)
    q = rng.uniform(-1, 1, size=(1, 5, 8, 256)).astype(np.float32)
    k = rng.uniform(-1, 1, size=(1, 7, 4, 256)).astype(np.float32)
    v = rng.uniform(-1, 1, size=(1, 7, 4, 32)).astype(np.float32)
    request = pb.ModelInferRequest(model_name="gemma-local")
    request.parameters["q_start_pos"].int64_param = 2
    request.parameters["causal"].bool_param = True
    request.parameters["softmax"].bool_param = True
    request.parameters["scale"].double_param = 0.0625
    for name, array in (("q", q), ("k", k), ("v", v)):
        add_input(request, name, "FP32", array)
    request.outputs.add().name = "output"
    request.outputs.add().name = "scores"
    response = kserve.ModelInfer(request, timeout=DEADLINE)
    assert [o.name for o in response.outputs] == ["output", "scores"]
    config = rp.RopeConfig(hf_config_json=read_fixture("gemma-3-12b-it.json"),
                           hf_layer_type="sliding_attention", max_len=4096, layout=rp.HALF)
    want = rope.AttentionScores(rp.AttentionScoresRequest(
        config=config, q=v1_tensor(rp.FLOAT32, q), k=v1_tensor(rp.FLOAT32, k),
        v=v1_tensor(rp.FLOAT32, v), q_start_pos=2, causal=True, softmax=True, scale=0.0625),
        timeout=DEADLINE)
    scores, scores_bytes = output(response, "scores")
    assert list(scores.shape) == [1, 8, 5, 7] and scores.datatype == "FP32"
    assert scores_bytes == want.scores.data
    assert output(response, "output")[1] == want.output.data


def test_attention_options_and_results_equal_rope_v1(kserve, rope):
    # Every option beside the tensors as a parameter, sinks as a tensor, and
    # the results asked for by output name (no v: no scores are made).
    rng = np.random.default_rng(12)
    q = rng.uniform(-1, 1, size=(1, 6, 4, 64)).astype(np.float32)
    k = rng.uniform(-1, 1, size=(1, 9, 2, 64)).astype(np.float32)
    sinks = np.array([0.5, -0.25, 1.0, 0.0], dtype=np.float32)
    request = pb.ModelInferRequest(model_name="attention")
    for name, value in (("head_dim", 64), ("max_len", 256), ("q_start_pos", 3),
                        ("window_left", 4), ("chunk_size", 8), ("top_k", 2),
                        ("score_rows_start", 1), ("score_rows_count", 3)):
        request.parameters[name].int64_param = value
    request.parameters["theta"].string_param = "500000"
    request.parameters["causal"].bool_param = True
    request.parameters["softcap"].double_param = 15.0
    for name, array in (("q", q), ("k", k), ("sinks", sinks)):
        add_input(request, name, "FP32", array)
    names = ["lse", "top_k_indices", "top_k_probs", "key_mass", "score_rows"]
    for name in names:
        request.outputs.add().name = name
    response = kserve.ModelInfer(request, timeout=DEADLINE)
    assert [o.name for o in response.outputs] == names
    want = rope.AttentionScores(rp.AttentionScoresRequest(
        config=rp.RopeConfig(theta=500000, head_dim=64, max_len=256),
        q=v1_tensor(rp.FLOAT32, q), k=v1_tensor(rp.FLOAT32, k), q_start_pos=3, causal=True,
        window_left=4, chunk_size=8, softcap=15.0, sinks=sinks.tolist(), top_k=2,
        score_rows_start=1, score_rows_count=3,
        results=[rp.LSE, rp.TOP_K, rp.KEY_MASS, rp.SCORE_ROWS]), timeout=DEADLINE)
    for name in names:
        tensor, data = output(response, name)
        assert data == getattr(want, name).data, name
        assert list(tensor.shape) == list(getattr(want, name).shape), name
    assert output(response, "top_k_indices")[0].datatype == "INT32"
    unknown = pb.ModelInferRequest()
    unknown.CopyFrom(request)
    unknown.outputs.add().name = "weights"
    expect_error(kserve.ModelInfer, unknown, grpc.StatusCode.INVALID_ARGUMENT,
                 "unexpected inference output 'weights' for model 'attention'")


def test_typed_contents_equal_raw_bytes(kserve):
    rng = np.random.default_rng(12)
    q = rng.uniform(-1, 1, size=(1, 2, 2, 16)).astype(np.float32)
    base = pb.ModelInferRequest(model_name="rotate")
    base.parameters["head_dim"].int64_param = 16
    base.parameters["max_len"].int64_param = 32
    raw = pb.ModelInferRequest()
    raw.CopyFrom(base)
    add_input(raw, "q", "FP32", q)
    typed = pb.ModelInferRequest()
    typed.CopyFrom(base)
    t = typed.inputs.add(name="q", datatype="FP32", shape=list(q.shape))
    t.contents.fp32_contents.extend(q.ravel().tolist())
    p = typed.inputs.add(name="positions", datatype="INT64", shape=[2])
    p.contents.int64_contents.extend([0, 1])
    assert (kserve.ModelInfer(raw, timeout=DEADLINE).raw_output_contents[0] ==
            kserve.ModelInfer(typed, timeout=DEADLINE).raw_output_contents[0])


def test_stream_answers_in_order_and_reports_errors_in_band(kserve):
    rng = np.random.default_rng(13)

    def requests():
        for i in range(4):
            r = pb.ModelInferRequest(model_name="rotate", id="s%d" % i)
            r.parameters["head_dim"].int64_param = 8 if i != 2 else 7
            r.parameters["max_len"].int64_param = 64
            add_input(r, "q", "FP32", rng.uniform(-1, 1, size=(1, 2, 1, 8)).astype(np.float32))
            yield r

    replies = list(kserve.ModelStreamInfer(requests(), timeout=DEADLINE))
    assert [r.infer_response.id for r in replies] == ["s0", "s1", "s2", "s3"]
    assert [bool(r.error_message) for r in replies] == [False, False, True, False]
    assert "head_dim is 7" in replies[2].error_message
    assert len(replies[3].infer_response.raw_output_contents[0]) == 2 * 8 * 4


def test_idle_streams_hold_no_call_slot():
    """ModelStreamInfer streams that never send take no call slot: with three
    times --max_concurrent_calls of them open and idle, ModelInfer, a
    RotateStream and rope.v1 calls from the same client and another one are
    served, and each idle stream is served once it sends."""
    import queue
    from conftest import SERVER_ARGS, ropeserve_binary
    from inference import grpc_service_pb2_grpc
    from ropeserve.proto import rope_pb2_grpc
    from ropeserve_process import RopeServe
    slots = 4
    rng = np.random.default_rng(37)

    def infer_request(i):
        r = pb.ModelInferRequest(model_name="rotate", id="idle%d" % i)
        r.parameters["head_dim"].int64_param = 8
        r.parameters["max_len"].int64_param = 64
        add_input(r, "q", "FP32", rng.uniform(-1, 1, size=(1, 2, 1, 8)).astype(np.float32))
        return r

    def rotate_request():
        r = rp.RotateRequest(q=v1_tensor(rp.FLOAT32, np.ones((1, 2, 1, 8), dtype=np.float32)))
        r.config.head_dim = 8
        r.config.max_len = 64
        return r

    def messages(outbox):
        while True:
            item = outbox.get(timeout=DEADLINE)
            if item is None:
                return
            yield item

    with RopeServe(ropeserve_binary(),
                   SERVER_ARGS + ["--max_concurrent_calls=%d" % slots]) as server:
        with grpc.insecure_channel(server.address) as idle_channel:
            idle = grpc_service_pb2_grpc.GRPCInferenceServiceStub(idle_channel)
            outboxes = [queue.Queue() for _ in range(3 * slots)]
            streams = [idle.ModelStreamInfer(messages(box), timeout=DEADLINE) for box in outboxes]
            # One message through the first stream: the streams opened
            # before it on this connection are under way too.
            outboxes[0].put(infer_request(0))
            assert not next(streams[0]).error_message
            for channel in (idle_channel, grpc.insecure_channel(server.address)):
                stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
                rope = rope_pb2_grpc.RopeServiceStub(channel)
                for i in range(2 * slots):
                    reply = stub.ModelInfer(infer_request(i), timeout=DEADLINE)
                    assert len(reply.raw_output_contents[0]) == 2 * 8 * 4
                    assert len(rope.Rotate(rotate_request(), timeout=DEADLINE).q.data) == 2 * 8 * 4
                replies = list(rope.RotateStream(iter([rotate_request()] * 2), timeout=DEADLINE))
                assert [len(r.q.data) for r in replies] == [2 * 8 * 4] * 2
                if channel is not idle_channel:
                    channel.close()
            for i, (box, stream) in enumerate(zip(outboxes, streams)):
                box.put(infer_request(i))
                reply = next(stream)
                assert not reply.error_message, reply.error_message
                assert reply.infer_response.id == "idle%d" % i
                box.put(None)
                assert list(stream) == []


# ---- errors --------------------------------------------------------------------------

def test_errors_name_the_tensor_or_parameter(kserve):
    q = np.zeros((1, 2, 2, 8), dtype=np.float32)

    def rotate_request(**parameters):
        r = pb.ModelInferRequest(model_name="rotate")
        r.parameters["head_dim"].int64_param = 8
        r.parameters["max_len"].int64_param = 64
        for name, value in parameters.items():
            if isinstance(value, str):
                r.parameters[name].string_param = value
            else:
                r.parameters[name].int64_param = value
        return r

    expect_error(kserve.ModelInfer, pb.ModelInferRequest(model_name="mistral"),
                 grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'mistral' is not found")
    r = rotate_request()
    add_input(r, "q", "INT32", q)
    expect_error(kserve.ModelInfer, r, grpc.StatusCode.INVALID_ARGUMENT,
                 "inference input 'q' data-type is 'INT32'")
    r = rotate_request()
    add_input(r, "q", "FP32", q, q.tobytes()[:-4])
    expect_error(kserve.ModelInfer, r, grpc.StatusCode.INVALID_ARGUMENT,
                 "unexpected total byte size 124 for input 'q', expecting 128")
    r = rotate_request(layout="diagonal")
    add_input(r, "q", "FP32", q)
    expect_error(kserve.ModelInfer, r, grpc.StatusCode.INVALID_ARGUMENT,
                 "parameter 'layout' is \"diagonal\"")
    r = rotate_request(start_pos=63)
    add_input(r, "q", "FP32", q)
    expect_error(kserve.ModelInfer, r, grpc.StatusCode.OUT_OF_RANGE, "max_len")
    r = rotate_request()
    add_input(r, "q", "FP32", q)
    r.outputs.add().name = "scores"
    expect_error(kserve.ModelInfer, r, grpc.StatusCode.INVALID_ARGUMENT,
                 "unexpected inference output 'scores' for model 'rotate'")
    r = pb.ModelInferRequest(model_name="llama")
    r.parameters["max_len"].int64_param = 64
    add_input(r, "q", "FP16", q.astype(np.float16))
    expect_error(kserve.ModelInfer, r, grpc.StatusCode.INVALID_ARGUMENT,
                 "parameter 'max_len' configures the built-in models")


# ---- shared memory ------------------------------------------------------------------

def test_system_shared_memory_round_trip(kserve, rope):
    rng = np.random.default_rng(17)
    q = rng.uniform(-2, 2, size=(1, 6, 4, 32)).astype(np.float32)
    region = shared_memory.SharedMemory(create=True, size=3 * q.nbytes)
    try:
        # Allocated, not only sized, as clients should (ropeserve would
        # allocate a sparse object's pages at registration itself).
        os.posix_fallocate(region._fd, 0, 3 * q.nbytes)
        key = "/" + region.name
        kserve.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
            name="io", key=key, offset=0, byte_size=3 * q.nbytes), timeout=DEADLINE)
        expect_error(kserve.SystemSharedMemoryRegister, pb.SystemSharedMemoryRegisterRequest(
            name="io", key=key, byte_size=16), grpc.StatusCode.ALREADY_EXISTS, "io")
        status = kserve.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(),
                                                 timeout=DEADLINE)
        assert status.regions["io"].key == key
        assert status.regions["io"].byte_size == 3 * q.nbytes
        region.buf[:q.nbytes] = q.tobytes()

        request = pb.ModelInferRequest(model_name="rotate")
        request.parameters["head_dim"].int64_param = 32
        request.parameters["max_len"].int64_param = 128
        request.parameters["start_pos"].int64_param = 90
        t = request.inputs.add(name="q", datatype="FP32", shape=list(q.shape))
        t.parameters["shared_memory_region"].string_param = "io"
        t.parameters["shared_memory_byte_size"].int64_param = q.nbytes
        o = request.outputs.add(name="q_out")
        o.parameters["shared_memory_region"].string_param = "io"
        o.parameters["shared_memory_offset"].int64_param = q.nbytes
        o.parameters["shared_memory_byte_size"].int64_param = q.nbytes
        response = kserve.ModelInfer(request, timeout=DEADLINE)
        assert response.raw_output_contents[0] == b""
        assert list(response.outputs[0].shape) == list(q.shape)

        want = rope.Rotate(rp.RotateRequest(
            config=rp.RopeConfig(head_dim=32, max_len=128), q=v1_tensor(rp.FLOAT32, q),
            start_pos=90), timeout=DEADLINE).q.data
        assert bytes(region.buf[q.nbytes:2 * q.nbytes]) == want
        assert bytes(region.buf[:q.nbytes]) == q.tobytes(), "the input region changed"

        kserve.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="io"),
                                            timeout=DEADLINE)
        # Unregistering what is not there is no error, as in Triton.
        kserve.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="io"),
                                            timeout=DEADLINE)
        assert not kserve.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(),
                                                   timeout=DEADLINE).regions
        expect_error(kserve.ModelInfer, request, grpc.StatusCode.NOT_FOUND, '"io"')
    finally:
        region.close()
        region.unlink()


def test_cuda_shared_memory_calls_on_a_cpu_server(kserve):
    assert not kserve.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(),
                                             timeout=DEADLINE).regions
    expect_error(kserve.CudaSharedMemoryRegister, pb.CudaSharedMemoryRegisterRequest(
        name="gpu", raw_handle=b"h" * 64, device_id=0, byte_size=1024),
        grpc.StatusCode.FAILED_PRECONDITION, "backend is cpu")
    expect_error(kserve.CudaSharedMemoryRegister, pb.CudaSharedMemoryRegisterRequest(
        name="gpu", raw_handle=b"h" * 10, device_id=0, byte_size=1024),
        grpc.StatusCode.INVALID_ARGUMENT, "cuda_ipc_handle is 10 bytes")
    kserve.CudaSharedMemoryUnregister(pb.CudaSharedMemoryUnregisterRequest(), timeout=DEADLINE)


# ---- statistics and metrics -----------------------------------------------------------

def test_statistics_and_metrics_count_the_calls(kserve, server):
    before = kserve.ModelStatistics(pb.ModelStatisticsRequest(name="rotate"), timeout=DEADLINE)
    r = pb.ModelInferRequest(model_name="rotate")
    r.parameters["head_dim"].int64_param = 8
    r.parameters["max_len"].int64_param = 64
    add_input(r, "q", "FP32", np.ones((1, 1, 1, 8), dtype=np.float32))
    for _ in range(3):
        kserve.ModelInfer(r, timeout=DEADLINE)
    after = kserve.ModelStatistics(pb.ModelStatisticsRequest(name="rotate"), timeout=DEADLINE)
    (b,), (a,) = before.model_stats, after.model_stats
    assert a.name == "rotate" and a.version == "1"
    assert a.inference_count - b.inference_count == 3
    assert a.inference_stats.success.count - b.inference_stats.success.count == 3
    assert a.inference_stats.compute_infer.ns > b.inference_stats.compute_infer.ns
    assert a.last_inference > 0
    every = kserve.ModelStatistics(pb.ModelStatisticsRequest(), timeout=DEADLINE)
    assert sorted(s.name for s in every.model_stats) == ["attention", "gemma-local", "llama",
                                                          "rotate"]
    counts = server.request_counts()
    assert counts.get(("ModelInfer", "OK"), 0) >= 3
    assert counts.get(("ModelStatistics", "OK"), 0) >= 2


# ---- the port's security applies -----------------------------------------------------

def test_tls_and_bearer_tokens_guard_the_inference_service(tmp_path):
    import shutil
    if shutil.which("openssl") is None:
        pytest.fail("the openssl CLI is needed for the TLS test (Debian: openssl)")
    from conftest import SERVER_ARGS, ropeserve_binary
    from inference import grpc_service_pb2_grpc
    from ropeserve_process import RopeServe
    from throwaway_pki import make_certs
    d = str(tmp_path)
    make_certs(d)
    token = "kserve-token-7f3"
    with open(os.path.join(d, "tokens"), "w") as f:
        f.write(token + "\n")
    args = SERVER_ARGS + ["--tls_cert_file=%s/server.pem" % d, "--tls_key_file=%s/server.key" % d,
                          "--auth_token_file=%s/tokens" % d]
    with RopeServe(ropeserve_binary(), args) as server:
        with open(os.path.join(d, "ca.pem"), "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        with grpc.secure_channel(server.address, credentials) as channel:
            stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = pb.ModelInferRequest(model_name="rotate")
            request.parameters["head_dim"].int64_param = 8
            request.parameters["max_len"].int64_param = 16
            add_input(request, "q", "FP32", np.ones((1, 1, 1, 8), dtype=np.float32))
            with pytest.raises(grpc.RpcError) as info:
                stub.ModelInfer(request, timeout=DEADLINE)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as info:
                stub.ServerReady(pb.ServerReadyRequest(), timeout=DEADLINE)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            metadata = [("authorization", "Bearer " + token)]
            reply = stub.ModelInfer(request, timeout=DEADLINE, metadata=metadata)
            assert len(reply.raw_output_contents[0]) == 32
