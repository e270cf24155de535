#!/usr/bin/env python3
"""Rotate a tensor through ropeserve's ModelInfer with Triton's own stubs.

Uses nothing of ropeserve's: only the Python stubs that PyPI's tritonclient
package generates from Triton's published grpc_service.proto
(tritonclient.grpc.service_pb2 and service_pb2_grpc), plus grpcio and
NumPy. It sends q [1, S, H, D] (float32) and explicit positions to the
built-in "rotate" model, with the RoPE configuration as request parameters,
checks the reply against a float64 NumPy reference of the interleaved
rotation, and prints the largest error.

    pip install "tritonclient[grpc]"
    ropeserve --listen=127.0.0.1:50051 &
    python3 rotate_with_triton_stubs.py --target 127.0.0.1:50051

Exit status: 0 the reply matches the reference; 1 it does not, or the call
failed (the gRPC status and message are printed).
"""

import argparse
import sys

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc


def reference_rotate(q, positions, theta):
    """Interleaved RoPE in float64: pair (2i, 2i+1) turned by pos * theta^(-2i/D)."""
    d = q.shape[-1]
    inv_freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = positions[:, None].astype(np.float64) * inv_freq[None, :]  # [S, D/2]
    cos = np.cos(angles)[None, :, None, :]
    sin = np.sin(angles)[None, :, None, :]
    x = q.astype(np.float64)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="ropeserve host:port")
    parser.add_argument("--seq", type=int, default=6)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head_dim", type=int, default=64)
    parser.add_argument("--theta", default="500000", help="as a decimal string")
    parser.add_argument("--deadline", type=float, default=20.0, help="seconds")
    args = parser.parse_args()

    rng = np.random.default_rng(7)
    q = rng.uniform(-2, 2, size=(1, args.seq, args.heads, args.head_dim)).astype(np.float32)
    positions = np.arange(args.seq, dtype=np.int64) * 37 + 5

    request = service_pb2.ModelInferRequest(model_name="rotate", id="published-stubs")
    request.parameters["theta"].string_param = args.theta
    request.parameters["head_dim"].int64_param = args.head_dim
    request.parameters["max_len"].int64_param = 8192
    request.parameters["layout"].string_param = "interleaved"
    for name, datatype, array in (("q", "FP32", q), ("positions", "INT64", positions)):
        tensor = request.inputs.add()
        tensor.name = name
        tensor.datatype = datatype
        tensor.shape.extend(array.shape)
        request.raw_input_contents.append(array.tobytes())
    request.outputs.add().name = "q_out"

    with grpc.insecure_channel(args.target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            live = stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=args.deadline)
            reply = stub.ModelInfer(request, timeout=args.deadline)
        except grpc.RpcError as error:
            print("call failed: %s: %s" % (error.code().name, error.details()))
            return 1
    output = reply.outputs[0]
    if not live.live or output.name != "q_out" or output.datatype != "FP32" or \
            list(output.shape) != list(q.shape) or reply.id != "published-stubs":
        print("unexpected reply: %s" % reply)
        return 1
    got = np.frombuffer(reply.raw_output_contents[0], dtype=np.float32).reshape(q.shape)
    want = reference_rotate(q, positions, float(args.theta))
    err = float(np.max(np.abs(got - want)))
    print("rotated q %s through ModelInfer (Triton's published stubs): max |err| %.3g vs float64"
          % (list(q.shape), err))
    return 0 if err <= 1e-5 * max(1.0, float(np.max(np.abs(want)))) else 1


if __name__ == "__main__":
    sys.exit(main())
