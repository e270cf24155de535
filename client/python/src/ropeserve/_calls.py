"""Each RPC as (serialized request, function that turns the reply bytes into results).

Shared by ropeserve.Client and ropeserve.aio.Client, so that the two differ
only in how they wait. Everything here runs before the call (argument
checks raise ValueError / TypeError then) or after it (decoding).
"""

import collections.abc
import dataclasses
import numbers
from typing import Any, NamedTuple, Optional

import numpy as np

from . import _proto, _tensors, _wire
from . import positions as _positions
from .config import RopeConfig
from .errors import Unimplemented

pb = _proto.pb


class Table(NamedTuple):
    """GetTable's reply: cos and sin float32 [count, rotary_dim/2] (multiplied by the
    attention factor), inv_freq float64 [rotary_dim/2], the attention factor, and
    the first row's position."""
    cos: np.ndarray
    sin: np.ndarray
    inv_freq: np.ndarray
    attention_factor: float
    start: int


class Scores(NamedTuple):
    """AttentionScores' reply: float32 scores [B, Hq, Sq, Sk] (probabilities when
    softmax was asked), and output [B, Sq, Hq, Dv] when v was given (else None)."""
    scores: Any
    output: Any


# The names of AttentionScores' results (rope.v1.AttentionResult), in its
# order, and the reply fields each fills.
RESULT_NAMES = ("scores", "output", "lse", "top_k", "key_mass", "score_rows")
_RESULT_ENUM = {"scores": "SCORES", "output": "OUTPUT", "lse": "LSE", "top_k": "TOP_K",
                "key_mass": "KEY_MASS", "score_rows": "SCORE_ROWS"}
_RESULT_FIELDS = {"scores": ("scores",), "output": ("output",), "lse": ("lse",),
                  "top_k": ("top_k_indices", "top_k_probs"), "key_mass": ("key_mass",),
                  "score_rows": ("score_rows",)}


class AttentionResults(collections.abc.Mapping):
    """AttentionScores' reply when `results` was given: each requested result by
    its reply field's name, as a mapping (results["lse"]) and as attributes
    (results.lse): scores [B, Hq, Sq, Sk], output [B, Sq, Hq, Dv], lse
    [B, Hq, Sq], top_k_indices (int32) and top_k_probs [B, Hq, Sq, top_k],
    key_mass [B, Hq, Sk], score_rows [B, Hq, count, Sk]. Only the requested
    results are keys; an attribute of one not requested is None."""

    FIELDS = ("scores", "output", "lse", "top_k_indices", "top_k_probs", "key_mass", "score_rows")

    def __init__(self, tensors):
        self._tensors = dict(tensors)

    def __getitem__(self, name):
        return self._tensors[name]

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self):
        return len(self._tensors)

    def __getattr__(self, name):
        if name in AttentionResults.FIELDS:
            return self.__dict__["_tensors"].get(name)
        raise AttributeError(name)

    def __repr__(self):
        return "AttentionResults(%s)" % ", ".join(
            "%s=%s%s" % (n, type(t).__name__, list(t.shape)) for n, t in self._tensors.items())


class Resolved(NamedTuple):
    """ResolveConfig's reply: the explicit RopeConfig the server derived (None if the
    reply carries none) and the whole rope.v1.ResolvedConfig message."""
    config: Optional[RopeConfig]
    message: Any


@dataclasses.dataclass
class RotateRequest:
    """One request of Client.rotate_stream: the arguments of Client.rotate."""
    q: Any
    k: Any = None
    config: Optional[RopeConfig] = None
    start_pos: int = 0
    positions: Any = None
    inverse: bool = False
    build: Any = None
    dtype: Any = None


def _check_config(config):
    if not isinstance(config, RopeConfig):
        raise TypeError("config is a %s: expected a ropeserve.RopeConfig" % type(config).__name__)
    return config


def _config_message(config):
    return _check_config(config).to_proto()


def _config_field(number, config):
    """The config as wire bytes of field `number` (its serialization is cached per config)."""
    return _wire.message_field(number, _check_config(config).serialized())


def _int(name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError("%s is %r: expected an int" % (name, value))
    return int(value)


def _field_number(message_class, name):
    return message_class.DESCRIPTOR.fields_by_name[name].number


_ROTATE_CONFIG = _field_number(pb.RotateRequest, "config")
_ROTATE_Q = _field_number(pb.RotateRequest, "q")
_ROTATE_K = _field_number(pb.RotateRequest, "k")
_SCORES_Q = _field_number(pb.AttentionScoresRequest, "q")
_SCORES_K = _field_number(pb.AttentionScoresRequest, "k")
_SCORES_V = _field_number(pb.AttentionScoresRequest, "v")


def _tensor_parts(number, tensor):
    return _wire.tensor_field(number, tensor.dtype, tensor.shape, tensor.data, tensor.nbytes)


def _same_kind_and_dtype(name, tensor, q):
    if tensor.kind != q.kind:
        raise ValueError("%s is a %s tensor but q is a %s one: pass the same kind" % (name, tensor.kind, q.kind))
    if tensor.dtype != q.dtype:
        raise ValueError("%s has dtype %s but q has %s: they must match" % (
            name, pb.DType.Name(tensor.dtype).lower(), pb.DType.Name(q.dtype).lower()))
    if len(tensor.shape) != len(q.shape):
        raise ValueError("%s has rank %d but q has rank %d: they must match" % (name, len(tensor.shape), len(q.shape)))


# ---- Rotate ----------------------------------------------------------------------

def rotate(q, k=None, *, config, start_pos=0, positions=None, inverse=False, build=None,
           dtype=None):
    """(request bytes, decode(reply bytes) -> (q, k)); dtype: the wire dtype (_tensors)."""
    message = pb.RotateRequest(start_pos=_int("start_pos", start_pos), inverse=bool(inverse),
                               **_tensors.position_fields(positions))
    if build is not None:
        message.build_positions.CopyFrom(_positions.request(build)[0])
    head = _config_field(_ROTATE_CONFIG, config) + message.SerializeToString()
    dtype = _tensors.wire_dtype(dtype)
    q_in = _tensors.encode("q", q, dtype=dtype)
    parts = _tensor_parts(_ROTATE_Q, q_in)
    k_in = None
    if k is not None:
        k_in = _tensors.encode("k", k, dtype=dtype)
        _same_kind_and_dtype("k", k_in, q_in)
        parts += _tensor_parts(_ROTATE_K, k_in)

    def decode(reply):
        _, tensors = _wire.split_reply(pb.RotateResponse, reply)
        q_out = _tensors.decode("q", tensors["q"], q_in) if "q" in tensors else None
        k_out = _tensors.decode("k", tensors["k"], k_in) if k_in is not None and "k" in tensors else None
        return q_out, k_out

    return _wire.join(head, parts), decode


def rotate_stream_item(item, default_config):
    """rotate() of one stream item: a RotateRequest, or a mapping of rotate()'s arguments."""
    if isinstance(item, RotateRequest):
        # Not dataclasses.asdict: it would deep-copy the tensors.
        item = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
    elif isinstance(item, collections.abc.Mapping):
        item = dict(item)
    else:
        raise TypeError("rotate_stream: a request is a %s: expected a ropeserve.RotateRequest or a "
                        "dict of rotate()'s arguments" % type(item).__name__)
    if item.get("config") is None:
        if default_config is None:
            raise ValueError("rotate_stream: a request has no config and rotate_stream got none")
        item["config"] = default_config
    unknown = set(item) - {f.name for f in dataclasses.fields(RotateRequest)}
    if unknown:
        raise TypeError("rotate_stream: unknown request keys %s" % sorted(unknown))
    q = item.pop("q")
    k = item.pop("k", None)
    return rotate(q, k, **item)


# ---- AttentionScores ----------------------------------------------------------------

def _result_numbers(results):
    """rope.v1.AttentionResult numbers of `results` (names such as "output", "lse")."""
    if isinstance(results, str):
        results = (results,)
    numbers_ = []
    for r in results:
        name = str(r).lower()
        if name not in _RESULT_ENUM:
            raise ValueError("results has %r: expected some of %s" % (r, ", ".join(RESULT_NAMES)))
        numbers_.append(pb.AttentionResult.Value(_RESULT_ENUM[name]))
    if not numbers_:
        raise ValueError("results is empty: name at least one of %s, or pass None for "
                         "scores (and output with v)" % ", ".join(RESULT_NAMES))
    return numbers_


def _optional_int(name, value):
    return None if value is None else _int(name, value)


def _floats(name, values):
    if values is None:
        return []
    return [float(x) for x in np.asarray(values, dtype=np.float64).reshape(-1)]


def attention_scores(q, k, v=None, *, config, q_start_pos=0, k_start_pos=0, causal=False,
                     softmax=False, scale=None, q_fractional_positions=None,
                     k_fractional_positions=None, dtype=None, results=None, window_left=None,
                     window_right=None, chunk_size=0, q_positions=None, k_positions=None,
                     softcap=0.0, sinks=None, alibi_slopes=None, top_k=0, score_rows_start=0,
                     score_rows_count=0):
    """(request bytes, decode(reply bytes) -> Scores, or AttentionResults when
    `results` names what to compute)."""
    if scale is not None and (not isinstance(scale, numbers.Real) or not scale > 0):
        raise ValueError("scale is %r: expected a number > 0, or None for 1/sqrt(head_dim)" % (scale,))
    fractional = {}
    for name, value in (("q_fractional_positions", q_fractional_positions),
                        ("k_fractional_positions", k_fractional_positions)):
        if value is not None:
            fractional[name] = [float(p) for p in np.asarray(
                value.detach().cpu().numpy() if hasattr(value, "detach") else value,
                dtype=np.float64).reshape(-1)]
    message = pb.AttentionScoresRequest(
        config=_config_message(config), q_start_pos=_int("q_start_pos", q_start_pos),
        k_start_pos=_int("k_start_pos", k_start_pos), causal=bool(causal), softmax=bool(softmax),
        scale=float(scale) if scale is not None else 0.0, **fractional)
    # The fields beyond today's are set only when given, so that a call
    # without them sends exactly today's request.
    if results is not None:
        message.results.extend(_result_numbers(results))
    window_left = _optional_int("window_left", window_left)
    if window_left is not None:
        message.window_left = window_left
    window_right = _optional_int("window_right", window_right)
    if window_right is not None:
        message.window_right = window_right
    message.chunk_size = _int("chunk_size", chunk_size)
    if q_positions is not None:
        message.q_positions.extend(_tensors.positions_list(q_positions))
    if k_positions is not None:
        message.k_positions.extend(_tensors.positions_list(k_positions))
    message.softcap = float(softcap)
    message.sinks.extend(_floats("sinks", sinks))
    message.alibi_slopes.extend(_floats("alibi_slopes", alibi_slopes))
    message.top_k = _int("top_k", top_k)
    message.score_rows_start = _int("score_rows_start", score_rows_start)
    message.score_rows_count = _int("score_rows_count", score_rows_count)
    dtype = _tensors.wire_dtype(dtype)
    q_in = _tensors.encode("q", q, dtype=dtype)
    k_in = _tensors.encode("k", k, dtype=dtype)
    _same_kind_and_dtype("k", k_in, q_in)
    parts = _tensor_parts(_SCORES_Q, q_in) + _tensor_parts(_SCORES_K, k_in)
    if v is not None:
        v_in = _tensors.encode("v", v, dtype=dtype)
        _same_kind_and_dtype("v", v_in, q_in)
        parts += _tensor_parts(_SCORES_V, v_in)

    def decode(reply):
        _, tensors = _wire.split_reply(pb.AttentionScoresResponse, reply)
        if results is None:
            scores = _tensors.decode("scores", tensors["scores"], q_in) if "scores" in tensors else None
            output = _tensors.decode("output", tensors["output"], q_in) if "output" in tensors else None
            return Scores(scores, output)
        return AttentionResults({name: _tensors.decode(name, tensors[name], q_in)
                                 for name in AttentionResults.FIELDS if name in tensors})

    return _wire.join(message.SerializeToString(), parts), decode


# ---- GetTable, GetServerInfo, ResolveConfig ---------------------------------------------

_NUMPY_RESULT = _tensors.TensorIn("numpy", pb.FLOAT32, (), None)


def table(config, start=0, count=0):
    """(request bytes, decode(reply bytes) -> Table)."""
    message = pb.GetTableRequest(config=_config_message(config), start=_int("start", start),
                                 count=_int("count", count))

    def decode(reply):
        rest, tensors = _wire.split_reply(pb.GetTableResponse, reply)
        cos = _tensors.decode("cos", tensors["cos"], _NUMPY_RESULT)
        sin = _tensors.decode("sin", tensors["sin"], _NUMPY_RESULT)
        return Table(cos, sin, np.array(rest.inv_freq, dtype=np.float64), rest.attention_factor, rest.start)

    return message.SerializeToString(), decode


def build_positions(source):
    """(request bytes, decode(reply bytes) -> positions.Positions)."""
    if not _proto.HAS_BUILD_POSITIONS:
        raise Unimplemented(
            "BuildPositions: this ropeserve package was built from a rope.proto without it; "
            "rebuild the package from a ropeserve whose rope.proto has it")
    message, batch, seq = _positions.request(source)

    def decode(reply):
        return _positions.decode(pb.BuildPositionsResponse.FromString(reply), batch, seq)

    return message.SerializeToString(), decode


def info():
    """(request bytes, decode(reply bytes) -> rope.v1.ServerInfo)."""
    return pb.GetServerInfoRequest().SerializeToString(), pb.ServerInfo.FromString


def resolve(config):
    """(request bytes, decode(reply bytes) -> Resolved); Unimplemented without ResolveConfig."""
    if not _proto.HAS_RESOLVE:
        raise Unimplemented(
            "ResolveConfig: this ropeserve package was built from a rope.proto without the "
            "ResolveConfig RPC; rebuild the package from a ropeserve whose rope.proto has it")
    reply_class = getattr(pb, _proto.SERVICE.methods_by_name["ResolveConfig"].output_type.name)

    def decode(reply):
        message = reply_class.FromString(reply)
        for field in message.DESCRIPTOR.fields:
            if (field.message_type is pb.RopeConfig.DESCRIPTOR and field.label != field.LABEL_REPEATED
                    and message.HasField(field.name)):
                return Resolved(RopeConfig.from_proto(getattr(message, field.name)), message)
        return Resolved(None, message)

    return _check_config(config).serialized(), decode
