#!/usr/bin/python3
"""Calls a ropeserve server from Python and checks its answers with NumPy.

Usage:
    /usr/bin/python3 client/python/rope_client_example.py [TARGET] [--stubs DIR]

TARGET defaults to localhost:50051. The rope.v1 stubs come from DIR (made by
generate_stubs.sh); without --stubs they are generated into a temporary
directory. Needs Debian's python3-grpcio, python3-protobuf and python3-numpy.

Checks, each against a float64 NumPy implementation of the formulas of
docs/design.md (in the repository) written out below:
  * Rotate, float32, INTERLEAVED and HALF layouts, GQA (Hq=4, Hkv=2), full and
    partial rotary_dim;
  * AttentionScores, causal softmax, GQA, with offsets and a value tensor.
Prints one line per check and exits 0 when all match, 1 on a mismatch, 2 when
a call fails.
"""

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 1e-5  # float32 results vs. float64 reference, |values| ~ 1


def load_stubs(stubs_dir):
    """Imports rope_pb2 / rope_pb2_grpc, generating them when needed."""
    if stubs_dir is None:
        stubs_dir = tempfile.mkdtemp(prefix="ropeserve-stubs-")
        atexit.register(shutil.rmtree, stubs_dir, ignore_errors=True)
        subprocess.run([os.path.join(HERE, "generate_stubs.sh"), stubs_dir],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
    sys.path.insert(0, stubs_dir)
    from rope.v1 import rope_pb2, rope_pb2_grpc  # pylint: disable=import-outside-toplevel
    return rope_pb2, rope_pb2_grpc


# ---- The formulas, in float64 ------------------------------------------------

def inv_freq(theta, rotary_dim):
    """inv_freq[i] = theta^(-2i/r), i = 0 .. r/2-1."""
    i = np.arange(rotary_dim // 2, dtype=np.float64)
    return theta ** (-2.0 * i / rotary_dim)


def rotate(x, positions, theta, rotary_dim, layout_half, inverse=False):
    """Rotates the first rotary_dim features of x [B,S,H,D] at positions [S]."""
    x = x.astype(np.float64)
    out = x.copy()
    angle = np.outer(positions, inv_freq(theta, rotary_dim))  # [S, r/2]
    if inverse:
        angle = -angle
    cos = np.cos(angle)[None, :, None, :]
    sin = np.sin(angle)[None, :, None, :]
    half = rotary_dim // 2
    if layout_half:   # pair i = (x[i], x[i + r/2])
        x0, x1 = x[..., :half], x[..., half:rotary_dim]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:rotary_dim] = x0 * sin + x1 * cos
    else:             # pair i = (x[2i], x[2i+1])
        x0, x1 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        out[..., 0:rotary_dim:2] = x0 * cos - x1 * sin
        out[..., 1:rotary_dim:2] = x0 * sin + x1 * cos
    return out


def attention(q, k, v, q_start, k_start, theta, layout_half, causal, softmax, scale):
    """S = (R q).(R k) * scale + mask, [B,Hq,Sq,Sk]; optional softmax and P v."""
    _, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    q_pos = q_start + np.arange(sq)
    k_pos = k_start + np.arange(sk)
    qr = rotate(q, q_pos, theta, d, layout_half)
    kr = rotate(k, k_pos, theta, d, layout_half)
    kr = np.repeat(kr, hq // hkv, axis=2)            # query head h uses kv head h / (Hq/Hkv)
    s = np.einsum("bihd,bjhd->bhij", qr, kr) * scale
    if causal:
        s = np.where(k_pos[None, :] > q_pos[:, None], -np.inf, s)
    if softmax:
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s = s / s.sum(axis=-1, keepdims=True)
    out = None
    if v is not None:
        vr = np.repeat(v.astype(np.float64), hq // hkv, axis=2)
        out = np.einsum("bhij,bjhd->bihd", s, vr)
    return s, out


# ---- Wire helpers ---------------------------------------------------------------

def to_tensor(pb, array):
    a = np.ascontiguousarray(array, dtype="<f4")
    return pb.Tensor(dtype=pb.FLOAT32, shape=list(a.shape), data=a.tobytes())


def from_tensor(pb, tensor):
    if tensor.dtype != pb.FLOAT32:
        raise ValueError("expected a FLOAT32 tensor, got dtype %d" % tensor.dtype)
    return np.frombuffer(tensor.data, dtype="<f4").reshape(tuple(tensor.shape))


def compare(name, got, want):
    """Prints one line; True when every element is within TOLERANCE."""
    want = np.asarray(want, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        print("FAIL  %-44s shape %s, want %s" % (name, got.shape, want.shape))
        return False
    finite = np.isfinite(want)
    same_inf = np.array_equal(np.isfinite(got), finite) and np.array_equal(got[~finite], want[~finite])
    err = float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))
    ok = same_inf and err <= TOLERANCE
    print("%s  %-44s shape %-16s max|err| %.2e" % ("ok  " if ok else "FAIL", name, got.shape, err))
    return ok


# ---- Checks ---------------------------------------------------------------------

def check_rotate(pb, stub, deadline):
    rng = np.random.default_rng(1234)
    b, s, hq, hkv, d = 2, 6, 4, 2, 16
    q = rng.standard_normal((b, s, hq, d)).astype(np.float32)
    k = rng.standard_normal((b, s, hkv, d)).astype(np.float32)
    start_pos, theta = 3, 10000.0
    ok = True
    for layout, rotary_dim in ((pb.INTERLEAVED, d), (pb.HALF, d), (pb.HALF, 8), (pb.INTERLEAVED, 8)):
        config = pb.RopeConfig(theta=theta, head_dim=d, rotary_dim=rotary_dim, max_len=64, layout=layout)
        reply = stub.Rotate(pb.RotateRequest(config=config, q=to_tensor(pb, q), k=to_tensor(pb, k),
                                             start_pos=start_pos), timeout=deadline)
        positions = start_pos + np.arange(s)
        half = layout == pb.HALF
        name = "Rotate %s rotary_dim=%d" % (pb.Layout.Name(layout), rotary_dim)
        ok &= compare(name + " q", from_tensor(pb, reply.q), rotate(q, positions, theta, rotary_dim, half))
        ok &= compare(name + " k (GQA)", from_tensor(pb, reply.k), rotate(k, positions, theta, rotary_dim, half))
    return ok


def check_attention(pb, stub, deadline):
    rng = np.random.default_rng(99)
    b, sq, sk, hq, hkv, d, dv = 1, 5, 7, 4, 2, 16, 8
    q = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hkv, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hkv, dv)).astype(np.float32)
    q_start, k_start, theta = 2, 0, 500000.0
    config = pb.RopeConfig(theta=theta, head_dim=d, max_len=32, layout=pb.HALF)
    reply = stub.AttentionScores(
        pb.AttentionScoresRequest(config=config, q=to_tensor(pb, q), k=to_tensor(pb, k), v=to_tensor(pb, v),
                                  q_start_pos=q_start, k_start_pos=k_start, causal=True, softmax=True),
        timeout=deadline)
    want_p, want_out = attention(q, k, v, q_start, k_start, theta, True, True, True, 1.0 / np.sqrt(d))
    ok = compare("AttentionScores causal softmax (GQA) probs", from_tensor(pb, reply.scores), want_p)
    ok &= compare("AttentionScores causal softmax output", from_tensor(pb, reply.output), want_out)
    # Raw scores with the -inf mask, scale given explicitly.
    reply = stub.AttentionScores(
        pb.AttentionScoresRequest(config=config, q=to_tensor(pb, q), k=to_tensor(pb, k),
                                  q_start_pos=q_start, k_start_pos=k_start, causal=True, scale=0.5),
        timeout=deadline)
    want_s, _ = attention(q, k, None, q_start, k_start, theta, True, True, False, 0.5)
    ok &= compare("AttentionScores causal scores (scale 0.5)", from_tensor(pb, reply.scores), want_s)
    return ok


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def channel_credentials(grpc, args):
    """TLS (and a bearer token) as ropectl's --tls_* / --token_file flags do; None: plaintext."""
    if not args.tls_ca_file:
        if args.tls_cert_file or args.token_file:
            raise SystemExit("rope_client_example: --tls-cert-file and --token-file need --tls-ca-file")
        return None
    credentials = grpc.ssl_channel_credentials(
        root_certificates=read_bytes(args.tls_ca_file),
        private_key=read_bytes(args.tls_key_file) if args.tls_key_file else None,
        certificate_chain=read_bytes(args.tls_cert_file) if args.tls_cert_file else None)
    if args.token_file:
        lines = [l.strip() for l in read_bytes(args.token_file).decode().splitlines()]
        token = next(l for l in lines if l and not l.startswith("#"))
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token))
    return credentials


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default="localhost:50051")
    parser.add_argument("--stubs", help="directory made by generate_stubs.sh")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds per call")
    parser.add_argument("--tls-ca-file", help="PEM CA bundle: connect with TLS, trusting it")
    parser.add_argument("--tls-cert-file", help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls-key-file", help="PEM private key of --tls-cert-file")
    parser.add_argument("--token-file", help="file whose first line is a bearer token (needs TLS)")
    args = parser.parse_args()

    import grpc  # pylint: disable=import-outside-toplevel
    pb, pb_grpc = load_stubs(args.stubs)
    limit = 512 << 20
    options = [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)]
    credentials = channel_credentials(grpc, args)
    if credentials is None:
        channel = grpc.insecure_channel(args.target, options=options)
    else:
        channel = grpc.secure_channel(args.target, credentials, options=options)
    stub = pb_grpc.RopeServiceStub(channel)
    try:
        info = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=args.deadline)
        print("server %s: ropeserve %s, backend %s (%s)" % (args.target, info.version, info.backend, info.device))
        ok = check_rotate(pb, stub, args.deadline)
        ok &= check_attention(pb, stub, args.deadline)
    except grpc.RpcError as e:
        print("rope_client_example: %s: %s" % (e.code().name, e.details()), file=sys.stderr)
        return 2
    finally:
        channel.close()
    print("all checks passed" if ok else "MISMATCH: see FAIL lines above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
