#!/usr/bin/python3
"""Calls a ropeserve server from Python and checks its answers with NumPy.

Usage:
    /usr/bin/python3 client/python/rope_client_example.py [TARGET]
        [--tls-ca-file F [--tls-cert-file F --tls-key-file F] [--token-file F]]

TARGET defaults to localhost:50051. A thin user of the ropeserve package
(client/python/README.md): install it, or put a build tree's
build/client/python on PYTHONPATH. The reference formulas below use NumPy
only, so tests import them without the package.

Checks, each against a float64 NumPy implementation of the formulas of
docs/design.md (in the repository) written out below:
  * Rotate, float32, INTERLEAVED and HALF layouts, GQA (Hq=4, Hkv=2), full and
    partial rotary_dim;
  * AttentionScores, causal softmax, GQA, with offsets and a value tensor.
Prints one line per check and exits 0 when all match, 1 on a mismatch, 2 when
a call fails.
"""

import argparse
import sys

import numpy as np

TOLERANCE = 1e-5  # float32 results vs. float64 reference, |values| ~ 1


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


# ---- Checks ---------------------------------------------------------------------

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

def check_rotate(ropeserve, client):
    rng = np.random.default_rng(1234)
    b, s, hq, hkv, d = 2, 6, 4, 2, 16
    q = rng.standard_normal((b, s, hq, d)).astype(np.float32)
    k = rng.standard_normal((b, s, hkv, d)).astype(np.float32)
    start_pos, theta = 3, 10000.0
    ok = True
    for layout, rotary_dim in (("interleaved", d), ("half", d), ("half", 8), ("interleaved", 8)):
        config = ropeserve.RopeConfig(theta=theta, head_dim=d, rotary_dim=rotary_dim, max_len=64, layout=layout)
        q_rot, k_rot = client.rotate(q, k, config=config, start_pos=start_pos)
        positions = start_pos + np.arange(s)
        half = layout == "half"
        name = "Rotate %s rotary_dim=%d" % (layout.upper(), rotary_dim)
        ok &= compare(name + " q", q_rot, rotate(q, positions, theta, rotary_dim, half))
        ok &= compare(name + " k (GQA)", k_rot, rotate(k, positions, theta, rotary_dim, half))
    return ok


def check_attention(ropeserve, client):
    rng = np.random.default_rng(99)
    b, sq, sk, hq, hkv, d, dv = 1, 5, 7, 4, 2, 16, 8
    q = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hkv, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hkv, dv)).astype(np.float32)
    q_start, k_start, theta = 2, 0, 500000.0
    config = ropeserve.RopeConfig(theta=theta, head_dim=d, max_len=32, layout="half")
    probs, output = client.attention_scores(q, k, v, config=config, q_start_pos=q_start,
                                            k_start_pos=k_start, causal=True, softmax=True)
    want_p, want_out = attention(q, k, v, q_start, k_start, theta, True, True, True, 1.0 / np.sqrt(d))
    ok = compare("AttentionScores causal softmax (GQA) probs", probs, want_p)
    ok &= compare("AttentionScores causal softmax output", output, want_out)
    # Raw scores with the -inf mask, scale given explicitly.
    scores, _ = client.attention_scores(q, k, config=config, q_start_pos=q_start, k_start_pos=k_start,
                                        causal=True, scale=0.5)
    want_s, _ = attention(q, k, None, q_start, k_start, theta, True, True, False, 0.5)
    ok &= compare("AttentionScores causal scores (scale 0.5)", scores, want_s)
    return ok


def read_token(path):
    """The first token of a file in ropeserve's token-file format ('#' comments)."""
    with open(path) as f:
        lines = [line.strip() for line in f]
    return next(line for line in lines if line and not line.startswith("#"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default="localhost:50051")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds per call")
    parser.add_argument("--tls-ca-file", help="PEM CA bundle: connect with TLS, trusting it")
    parser.add_argument("--tls-cert-file", help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls-key-file", help="PEM private key of --tls-cert-file")
    parser.add_argument("--token-file", help="file whose first line is a bearer token (needs TLS)")
    args = parser.parse_args()

    try:
        import ropeserve  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        print("rope_client_example: the ropeserve package is not importable (%s): see "
              "client/python/README.md" % e, file=sys.stderr)
        return 2
    try:
        client = ropeserve.Client(
            args.target, ca_file=args.tls_ca_file, cert_file=args.tls_cert_file,
            key_file=args.tls_key_file, deadline=args.deadline,
            token=read_token(args.token_file) if args.token_file else None)
    except ValueError as e:
        raise SystemExit("rope_client_example: %s" % e)
    try:
        with client:
            info = client.info()
            print("server %s: ropeserve %s, backend %s (%s)" % (args.target, info.version, info.backend,
                                                               info.device))
            ok = check_rotate(ropeserve, client)
            ok &= check_attention(ropeserve, client)
    except ropeserve.RopeError as e:
        print("rope_client_example: %s" % e, file=sys.stderr)
        return 2
    print("all checks passed" if ok else "MISMATCH: see FAIL lines above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
