#!/usr/bin/python3
"""A Python grpcio + torch server for the rope.v1 service's Rotate and
AttentionScores (and GetServerInfo, which ropeload calls first): the baseline
ropeserve is compared with through the same load client
(bench/run_torch_server_bench.sh). Written the way a user would, with torch
doing the arithmetic in float32 whatever the storage type, and tables cached
per config as ropeserve does; not a production server (it checks little).

Usage:
  /usr/bin/python3 bench/torch_server/torch_rope_server.py [--listen=127.0.0.1:0]
      [--torch_threads=N] [--workers=N] [--stubs=DIR] [--malloc=ropeserve|default]
(--stubs: a directory holding ropeserve/proto/, as client/python/build_proto.py
writes it; generated into a temporary directory when absent)
Prints "torch_rope_server listening on HOST:PORT" once serving; stops on
SIGTERM / SIGINT.

Supports plain RoPE and the linear and llama3 scalings (others answer
UNIMPLEMENTED), both layouts, partial rotary_dim, start_pos or explicit
positions, inverse, GQA, causal mask, softmax and v.
Needs Debian's python3-torch, python3-grpcio, python3-protobuf.
"""

import argparse
import atexit
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent import futures

import grpc
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench"))
import glibc_malloc  # noqa: E402  (bench/glibc_malloc.py)

# rope.v1.DType -> torch dtype, and the int type that carries its bytes.
TORCH_DTYPES = {1: torch.float32, 2: torch.float16, 3: torch.bfloat16}
BITS_DTYPES = {torch.float32: torch.int32, torch.float16: torch.int16,
               torch.bfloat16: torch.int16}


def load_stubs(stubs_dir):
    if stubs_dir is None:
        stubs_dir = tempfile.mkdtemp(prefix="torch-rope-stubs-")
        atexit.register(shutil.rmtree, stubs_dir, ignore_errors=True)
        subprocess.run([sys.executable, os.path.join(REPO, "client", "python", "build_proto.py"),
                        "--out", stubs_dir, "--proto-dir", os.path.join(REPO, "proto")],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
    sys.path.insert(0, stubs_dir)
    # ropeserve.proto alone (build_proto.py writes no ropeserve/__init__.py):
    # the messages and stubs the Python client uses, without the client.
    from ropeserve.proto import rope_pb2, rope_pb2_grpc  # pylint: disable=import-outside-toplevel
    return rope_pb2, rope_pb2_grpc


class BadRequest(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def inv_freq_for(config):
    """inv_freq in float64, with the config's scaling (transformers' rules)."""
    theta = config.theta or 10000.0
    rotary = config.rotary_dim or config.head_dim
    inv = 1.0 / theta ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary)
    which = config.WhichOneof("scaling")
    if which is None:
        return inv
    if which == "linear":
        return inv / (config.linear.factor or 1.0)
    if which == "llama3":
        s = config.llama3
        factor = s.factor or 8.0
        low, high = s.low_freq_factor or 1.0, s.high_freq_factor or 4.0
        original = s.original_max_position_embeddings or 8192
        low_wavelen, high_wavelen = original / low, original / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (original / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(medium, smoothed, scaled)
    raise BadRequest(grpc.StatusCode.UNIMPLEMENTED,
                     f"config.scaling {which}: not supported by this benchmark server")


class Tables:
    """cos/sin [max_len, rotary_dim/2] float32 per config, computed in float64."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tables = {}

    def get(self, config):
        key = config.SerializeToString(deterministic=True)
        with self._lock:
            table = self._tables.get(key)
        if table is None:
            inv = inv_freq_for(config)
            angles = torch.outer(torch.arange(config.max_len, dtype=torch.float64), inv)
            table = (angles.cos().float(), angles.sin().float())
            with self._lock:
                self._tables[key] = table
        return table


def to_tensor(msg, name):
    dtype = TORCH_DTYPES.get(msg.dtype)
    if dtype is None:
        raise BadRequest(grpc.StatusCode.INVALID_ARGUMENT, f"{name}.dtype is {msg.dtype}")
    shape = list(msg.shape)
    if len(shape) == 3:
        shape = [1] + shape
    if len(shape) != 4:
        raise BadRequest(grpc.StatusCode.INVALID_ARGUMENT, f"{name}.shape has rank {len(shape)}")
    flat = torch.frombuffer(bytearray(msg.data), dtype=BITS_DTYPES[dtype]).view(dtype)
    if flat.numel() != math.prod(shape):
        raise BadRequest(grpc.StatusCode.INVALID_ARGUMENT, f"{name}.data has the wrong length")
    return flat.view(shape)


def to_bytes(t):
    t = t.contiguous()
    return t.view(BITS_DTYPES[t.dtype]).numpy().tobytes()


def positions_for(b, s, start, explicit):
    if len(explicit) == 0:
        return (start + torch.arange(s)).expand(b, s)
    p = torch.tensor(list(explicit), dtype=torch.int64)
    return p.expand(b, s) if p.numel() == s else p.view(b, s)


def rotate(x, cos_sin, positions, config, inverse=False):
    """x [B,S,H,D] (any dtype) rotated in float32; returns float32 [B,S,H,D]."""
    rotary = config.rotary_dim or config.head_dim
    half = rotary // 2
    cos_t, sin_t = cos_sin
    if int(positions.max()) >= cos_t.shape[0] or int(positions.min()) < 0:
        raise BadRequest(grpc.StatusCode.OUT_OF_RANGE, "a position is outside [0, max_len)")
    c = cos_t[positions].unsqueeze(2)  # [B,S,1,half]
    s = sin_t[positions].unsqueeze(2)
    if inverse:
        s = -s
    x = x.float()
    r = x[..., :rotary]
    if config.layout == 2:  # HALF: pairs (i, i + r/2)
        x0, x1 = r[..., :half], r[..., half:]
        y = torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    else:  # INTERLEAVED: pairs (2i, 2i+1)
        x0, x1 = r[..., 0::2], r[..., 1::2]
        y = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    if rotary == x.shape[-1]:
        return y
    return torch.cat((y, x[..., rotary:]), dim=-1)


def make_servicer(rope_pb2, rope_pb2_grpc, tables):
    class Servicer(rope_pb2_grpc.RopeServiceServicer):
        def _run(self, context, fn):
            try:
                return fn()
            except BadRequest as e:
                context.abort(e.code, str(e))
            except (RuntimeError, ValueError) as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            return None

        def Rotate(self, request, context):
            def work():
                reply = rope_pb2.RotateResponse()
                cos_sin = tables.get(request.config)
                for name in ("q", "k"):
                    if not request.HasField(name):
                        continue
                    msg = getattr(request, name)
                    x = to_tensor(msg, name)
                    b, s = x.shape[0], x.shape[1]
                    pos = positions_for(b, s, request.start_pos, request.positions)
                    y = rotate(x, cos_sin, pos, request.config, request.inverse).to(x.dtype)
                    out = getattr(reply, name)
                    out.dtype = msg.dtype
                    out.shape.extend(msg.shape)
                    out.data = to_bytes(y)
                return reply
            return self._run(context, work)

        def AttentionScores(self, request, context):
            def work():
                cfg = request.config
                cos_sin = tables.get(cfg)
                q = to_tensor(request.q, "q")
                k = to_tensor(request.k, "k")
                b, sq, hq, d = q.shape
                sk, hkv = k.shape[1], k.shape[2]
                group = hq // hkv
                qr = rotate(q, cos_sin, positions_for(b, sq, request.q_start_pos, []), cfg)
                kr = rotate(k, cos_sin, positions_for(b, sk, request.k_start_pos, []), cfg)
                scale = request.scale or 1.0 / math.sqrt(d)
                # GQA by a view: query head h = kv * group + j.
                qh = qr.permute(0, 2, 1, 3).reshape(b, hkv, group * sq, d)
                kh = kr.permute(0, 2, 1, 3)
                scores = torch.matmul(qh, kh.transpose(-1, -2)).mul_(scale)
                scores = scores.view(b, hq, sq, sk)
                masked = None
                if request.causal:
                    qpos = request.q_start_pos + torch.arange(sq)
                    kpos = request.k_start_pos + torch.arange(sk)
                    masked = kpos[None, :] > qpos[:, None]
                    scores.masked_fill_(masked, float("-inf"))
                probs = None
                if request.softmax or request.HasField("v"):
                    probs = torch.softmax(scores, dim=-1)
                    if masked is not None:  # fully masked rows: 0, not NaN
                        probs = torch.nan_to_num(probs, nan=0.0)
                reply = rope_pb2.AttentionScoresResponse()
                result = probs if request.softmax else scores
                reply.scores.dtype = 1
                reply.scores.shape.extend([b, hq, sq, sk])
                reply.scores.data = to_bytes(result)
                if request.HasField("v"):
                    v = to_tensor(request.v, "v").float()
                    dv = v.shape[-1]
                    vh = v.permute(0, 2, 1, 3)  # [B,Hkv,Sk,Dv]
                    out = torch.matmul(probs.view(b, hkv, group * sq, sk), vh)
                    out = out.view(b, hq, sq, dv).permute(0, 2, 1, 3)
                    reply.output.dtype = 1
                    reply.output.shape.extend([b, sq, hq, dv])
                    reply.output.data = to_bytes(out)
                return reply
            return self._run(context, work)

        def GetServerInfo(self, request, context):
            info = rope_pb2.ServerInfo()
            info.version = f"torch-{torch.__version__}"
            info.backend = "torch"
            info.device = f"cpu (torch {torch.__version__}, {torch.get_num_threads()} threads)"
            info.threads = torch.get_num_threads()
            return info

    return Servicer()


def use_ropeserve_malloc_settings():
    """The glibc settings ropeserve applies at start-up (docs/operations.md,
    "Large buffers"; server/service/malloc_settings.cc): arenas capped at a
    quarter of the CPUs (2 to 8), buffers up to 32 MiB from the heap and 64
    MiB kept free per arena, so that the comparison is between the servers,
    not their allocators. Returns False when glibc refuses them."""
    arenas = min(max((os.cpu_count() or 1) // 4, 2), 8)
    return glibc_malloc.mallopt({glibc_malloc.M_ARENA_MAX: arenas,
                                 glibc_malloc.M_MMAP_THRESHOLD: 32 << 20,
                                 glibc_malloc.M_TRIM_THRESHOLD: 64 << 20})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--torch_threads", type=int, default=0,
                        help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                        help="gRPC worker threads")
    parser.add_argument("--stubs", default=None, help="directory holding ropeserve/proto/ (generated if absent)")
    parser.add_argument("--malloc", choices=("ropeserve", "default"), default="ropeserve",
                        help="ropeserve: glibc set up as ropeserve sets itself up; default: glibc's own")
    args = parser.parse_args()
    if args.malloc == "ropeserve" and not use_ropeserve_malloc_settings():
        print("torch_rope_server: glibc refused mallopt; running with its defaults", file=sys.stderr)
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    rope_pb2, rope_pb2_grpc = load_stubs(args.stubs)
    limit = 512 << 20
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers),
                         options=[("grpc.max_receive_message_length", limit),
                                  ("grpc.max_send_message_length", limit)])
    rope_pb2_grpc.add_RopeServiceServicer_to_server(
        make_servicer(rope_pb2, rope_pb2_grpc, Tables()), server)
    port = server.add_insecure_port(args.listen)
    if port == 0:
        print(f"torch_rope_server: cannot listen on {args.listen}", file=sys.stderr)
        return 1
    server.start()
    host = args.listen.rsplit(":", 1)[0]
    print(f"torch_rope_server listening on {host}:{port}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=2).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
