"""RopeConfig: the rotary embedding to apply, as a frozen dataclass over rope.v1.RopeConfig.

Field names and meanings are those of proto/rope/v1/rope.proto; a field left
None is sent as 0, which the server reads as the default that file names
(theta 10000, rotary_dim = head_dim, ...). The scaling variants are one
dataclass each, named after their proto messages, with the formulas of
Hugging Face transformers' modeling_rope_utils.py:

    RopeConfig(head_dim=128, max_len=8192, theta=500000.0, layout="half",
               scaling=Llama3Scaling(factor=8.0, original_max_position_embeddings=8192))

Configs are immutable and hashable, so they can be shared between threads
and reused across calls (each converts to its proto message once).
"""

import dataclasses
import enum
import json
import os
from typing import Optional, Tuple, Union

from . import _proto
from .errors import Unimplemented

pb = _proto.pb


class Layout(enum.Enum):
    """Which features form the rotated pairs (rope.proto, enum Layout).

    INTERLEAVED: pair i = (x[2i], x[2i+1]) (Meta's Llama reference, GPT-J).
    HALF: pair i = (x[i], x[i + r/2]) (GPT-NeoX, Hugging Face rotate_half).
    """

    INTERLEAVED = "interleaved"
    HALF = "half"

    @classmethod
    def of(cls, value):
        """A Layout from a Layout, its name or value ("half", "HALF"), or a rope.v1 enum number."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool):
            if value in (pb.LAYOUT_UNSPECIFIED, pb.INTERLEAVED):
                return cls.INTERLEAVED
            if value == pb.HALF:
                return cls.HALF
        raise ValueError("layout is %r: expected 'interleaved' or 'half'" % (value,))


# ---- Scaling variants -----------------------------------------------------------
# Each class names the RopeConfig oneof member it fills (_ONEOF, a class
# attribute, not a field). Fields map 1:1 onto the proto message's fields.

@dataclasses.dataclass(frozen=True)
class LinearScaling:
    """Position interpolation ("linear"): inv_freq / factor."""
    factor: float
    _ONEOF = "linear"


@dataclasses.dataclass(frozen=True)
class DynamicNtkScaling:
    """Dynamic NTK ("dynamic"): a larger base for sequences past the original length."""
    factor: float
    original_max_position_embeddings: int
    _ONEOF = "dynamic_ntk"


@dataclasses.dataclass(frozen=True)
class YarnScaling:
    """YaRN ("yarn"). None: the server derives the value as rope.proto says."""
    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: Optional[float] = None
    mscale_all_dim: Optional[float] = None
    attention_factor: Optional[float] = None
    truncate: Optional[bool] = None  # None: True (floor/ceil the correction range); gpt-oss: False
    _ONEOF = "yarn"


@dataclasses.dataclass(frozen=True)
class Llama3Scaling:
    """Llama 3.1 ("llama3"); the defaults are Llama 3.1's."""
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    _ONEOF = "llama3"


@dataclasses.dataclass(frozen=True)
class LongRopeScaling:
    """LongRoPE ("longrope", Phi-3): per-frequency factors, rotary_dim/2 each."""
    short_factor: Tuple[float, ...]
    long_factor: Tuple[float, ...]
    original_max_position_embeddings: int
    attention_factor: Optional[float] = None
    # The model's max_position_embeddings, for the default attention factor
    # (transformers' rule); None: the config's max_len. The short or long
    # list is chosen per request either way.
    max_position_embeddings: Optional[int] = None
    _ONEOF = "longrope"

    def __post_init__(self):
        object.__setattr__(self, "short_factor", tuple(float(x) for x in self.short_factor))
        object.__setattr__(self, "long_factor", tuple(float(x) for x in self.long_factor))


@dataclasses.dataclass(frozen=True)
class ProportionalScaling:
    """Proportional ("proportional", Gemma 4's full-attention layers).

    The exponents run over the whole rotary width r; the first rotated_pairs
    frequencies are theta^(-2i/r) / factor, the rest 0 (those pairs stay as
    they are). transformers: rotated_pairs = int(partial_rotary_factor *
    head_dim // 2), rotary_dim = head_dim.
    """
    rotated_pairs: int
    factor: float = 1.0
    _ONEOF = "proportional"


@dataclasses.dataclass(frozen=True)
class DynamicNtkAlphaScaling:
    """HunYuan's dynamic NTK with alpha ("dynamic" with "alpha"): a fixed base
    theta * alpha^(r/(r-2)), whatever the length; no factor."""
    alpha: float
    _ONEOF = "dynamic_ntk_alpha"


@dataclasses.dataclass(frozen=True)
class NtkScaling:
    """Fixed NTK ("ntk", vLLM's NTKScalingRotaryEmbedding); mixed_b None: the plain form."""
    factor: float
    mixed_b: Optional[float] = None
    _ONEOF = "ntk"


@dataclasses.dataclass(frozen=True)
class DeepseekYarnScaling:
    """DeepSeek's YaRN as vLLM computes it ("deepseek_yarn"). None: vLLM's
    default (mscale 1, mscale_all_dim 0, attn_factor 1, extrapolation_factor 1)."""
    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: Optional[float] = None
    mscale_all_dim: Optional[float] = None
    attn_factor: Optional[float] = None
    extrapolation_factor: Optional[float] = None
    _ONEOF = "deepseek_yarn"


@dataclasses.dataclass(frozen=True)
class NoRope:
    """A layer without rotary embedding (Llama 4's NoPE layers): Rotate leaves
    q and k as they are; with floor_scale, AttentionScores multiplies query i
    at position p by log(floor((p + 1) / floor_scale) + 1) * attn_scale + 1
    (Llama 4: floor_scale 8192, attn_scale 0.1). None: 0 (no tuning)."""
    floor_scale: Optional[float] = None
    attn_scale: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class Mrope:
    """Multimodal RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): rope.proto's Mrope.

    section: 3 values (t, h, w) summing to rotary_dim/2, e.g. (16, 24, 24).
    interleaved: Qwen3-VL's interleaved assignment; False: Qwen2-VL's chunks.
    With it, Rotate takes positions [3, S] or [3, B, S] (transformers'
    position_ids for M-RoPE).
    """
    section: Tuple[int, ...]
    interleaved: bool = False

    def __post_init__(self):
        object.__setattr__(self, "section", tuple(int(x) for x in self.section))


@dataclasses.dataclass(frozen=True)
class RopeAxis:
    """One axis of axial RoPE (rope.proto's RopeAxis): dim features (dim/2 consecutive pairs).

    Pair j of the axis turns by p * interpolation * theta'^(-2j/dim), with
    theta' = theta * theta_rescale^(dim / (dim - 2)) and p the token's
    position on this axis. None: theta is the config's, the factors 1.
    """
    dim: int
    theta: Optional[float] = None
    theta_rescale: Optional[float] = None
    interpolation: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class AxialRope:
    """Axial RoPE (Flux, Wan 2.1, HunyuanVideo, SAM 2): a frequency ladder per axis.

    axes: RopeAxis values (or plain ints, each a dim), in pair order; their
    dims sum to rotary_dim. With it, positions are [n_axes, S] or
    [n_axes, B, S]. The model helpers give the published splits.
    """
    axes: Tuple[RopeAxis, ...]

    def __post_init__(self):
        axes = tuple(a if isinstance(a, RopeAxis) else RopeAxis(int(a)) for a in self.axes)
        object.__setattr__(self, "axes", axes)

    @classmethod
    def flux(cls):
        """Flux.1's EmbedND(dim=128, theta=10000, axes_dim=[16, 56, 56]) (with RopeConfig theta 10000)."""
        return cls((16, 56, 56))

    @classmethod
    def wan(cls, head_dim=128):
        """Wan 2.1's split of head_dim: c - 2(c // 3), c // 3, c // 3 pairs, c = head_dim // 2."""
        c = head_dim // 2
        return cls((2 * (c - 2 * (c // 3)), 2 * (c // 3), 2 * (c // 3)))

    @classmethod
    def hunyuan_video(cls, rope_dim_list=(16, 56, 56), theta_rescale=None, interpolation=None):
        """HunyuanVideo's get_nd_rotary_pos_embed(rope_dim_list, ...) (RopeConfig theta 256)."""
        return cls(tuple(RopeAxis(int(d), theta_rescale=theta_rescale, interpolation=interpolation)
                         for d in rope_dim_list))

    @classmethod
    def sam2(cls, head_dim):
        """SAM 2's compute_axial_cis(dim=head_dim): x then y, head_dim/2 features each."""
        return cls((head_dim // 2, head_dim // 2))


SCALINGS = (LinearScaling, DynamicNtkScaling, YarnScaling, Llama3Scaling, LongRopeScaling,
            ProportionalScaling, DynamicNtkAlphaScaling, NtkScaling, DeepseekYarnScaling)
Scaling = Union[LinearScaling, DynamicNtkScaling, YarnScaling, Llama3Scaling, LongRopeScaling,
                ProportionalScaling, DynamicNtkAlphaScaling, NtkScaling, DeepseekYarnScaling]
_SCALING_BY_ONEOF = {cls._ONEOF: cls for cls in SCALINGS}


def _set_field(message, where, name, value):
    """message.name = value (or extend, for sequences); ValueError naming `where.name` when refused."""
    try:
        if isinstance(value, (tuple, list)):
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)
    except (TypeError, ValueError) as e:
        raise ValueError("%s.%s is %r: %s" % (where, name, value, e)) from None


def _scaling_to_proto(scaling, config_message):
    message = getattr(config_message, scaling._ONEOF)
    message.SetInParent()  # selects the oneof member even when every field is 0
    for field in dataclasses.fields(scaling):
        value = getattr(scaling, field.name)
        if value is not None:
            _set_field(message, "RopeConfig.scaling", field.name, value)


def _scaling_from_proto(config_message):
    which = config_message.WhichOneof("scaling")
    if which is None:
        return None
    cls = _SCALING_BY_ONEOF.get(which)
    if cls is None:
        raise ValueError("rope.v1.RopeConfig.%s has no ropeserve dataclass: update the package" % which)
    message = getattr(config_message, which)
    values = {}
    for field in dataclasses.fields(cls):
        value = getattr(message, field.name)
        if message.DESCRIPTOR.fields_by_name[field.name].has_presence and not message.HasField(field.name):
            value = None  # an `optional` field left unset
        elif isinstance(value, bool):
            pass
        elif isinstance(value, (int, float)) and value == 0 and field.default is not dataclasses.MISSING:
            value = field.default  # rope.proto: 0 means the default
        elif not isinstance(value, (int, float)):
            value = tuple(value)
        values[field.name] = value
    return cls(**values)


# ---- RopeConfig --------------------------------------------------------------------

_ANGLE_PRECISIONS = {"exact": pb.ANGLE_EXACT, "float32": pb.ANGLE_FLOAT32}

# model_types whose transformers modeling code pairs neighbours (INTERLEAVED);
# every other one rotates halves (HALF). The same table as the C++ clients'
# (client/hf_config_defaults.cc); tests/python/test_hf_defaults.py holds the
# two equal.
_INTERLEAVED_MODEL_TYPES = frozenset({
    "codegen", "cohere", "cohere2", "deepseek_v2", "deepseek_v3", "ernie4_5", "ernie4_5_moe",
    "glm", "glm4", "gptj", "helium", "llama4", "llama4_text",
})


# max_position_embeddings of transformers' config classes whose published
# config.json leaves it out (as client/hf_config_defaults.cc and the server).
_CLASS_MAX_POSITION_EMBEDDINGS = {"gemma3": 131072, "gemma3_text": 131072}


def transformers_layout(model_type):
    """The Layout transformers' modeling code uses for a model_type (HALF unless listed)."""
    return Layout.INTERLEAVED if model_type in _INTERLEAVED_MODEL_TYPES else Layout.HALF


def _top_or_text(parsed, key):
    """parsed[key], else parsed["text_config"][key]; None when neither has it."""
    if key in parsed:
        return parsed[key]
    text = parsed.get("text_config")
    return text.get(key) if isinstance(text, dict) else None


def hf_layout(parsed):
    """(Layout, why) that a config.json dict implies: its rope_interleave when it has one
    (DeepSeek-V3), else transformers' layout for its model_type."""
    interleave = _top_or_text(parsed, "rope_interleave")
    if isinstance(interleave, bool):
        return (Layout.INTERLEAVED if interleave else Layout.HALF,
                "rope_interleave %s" % ("true" if interleave else "false"))
    model_type = _top_or_text(parsed, "model_type")
    model_type = model_type if isinstance(model_type, str) else ""
    layout = transformers_layout(model_type)
    return layout, "%s: transformers %s" % (
        "model_type " + model_type if model_type else "no model_type",
        "pairs neighbours" if layout is Layout.INTERLEAVED else "rotates halves")


@dataclasses.dataclass(frozen=True, repr=False)
class RopeConfig:
    """The rotary embedding to apply (rope.v1.RopeConfig).

    head_dim: features per head (D); required unless hf_config_json is set.
    max_len: table length; every position used must be < max_len.
    theta: frequency base; None means the server default (10000).
    rotary_dim: features that rotate; None means head_dim.
    layout: Layout or "interleaved" / "half".
    scaling: one of LinearScaling, DynamicNtkScaling, YarnScaling,
        Llama3Scaling, LongRopeScaling, ProportionalScaling,
        DynamicNtkAlphaScaling, NtkScaling, DeepseekYarnScaling, or None for
        plain RoPE.
    mrope: Mrope sections for multimodal RoPE, or None.
    mrope_ernie_3d: with mrope (t, h, w), Ernie 4.5-VL's 3-D layout.
    rotary_offset: the first rotated feature (DeepSeek MLA heads rotate their
        last ones: qk_nope_head_dim); None: 0.
    no_rope: NoRope for a layer without rotary embedding, or None.
    hf_config_json, hf_layer_type: a model's config.json for the server to
        derive the rest from (see from_hf); needs a rope.proto that has them.
    hf_layer_index: with hf_config_json, the decoder layer (from 0) meant:
        its layer type, NoPE or not, its rope group; None: unset.
    axial: AxialRope (a frequency ladder per axis of an image or video
        grid), or None.
    angle_precision: "exact" (angles in double, cos/sin rounded once) or
        "float32" (transformers' float32 angle arithmetic, for bit-parity
        checks against a transformers model; plain, linear and llama3 only).
    """

    head_dim: int
    max_len: int
    theta: Optional[float] = None
    rotary_dim: Optional[int] = None
    layout: Layout = Layout.INTERLEAVED
    scaling: Optional[Scaling] = None
    mrope: Optional[Mrope] = None
    hf_config_json: Optional[str] = None
    hf_layer_type: Optional[str] = None
    rotary_offset: Optional[int] = None
    mrope_ernie_3d: bool = False
    no_rope: Optional[NoRope] = None
    hf_layer_index: Optional[int] = None
    axial: Optional[AxialRope] = None
    angle_precision: str = "exact"

    def __post_init__(self):
        object.__setattr__(self, "layout", Layout.of(self.layout))
        if self.angle_precision not in _ANGLE_PRECISIONS:
            raise ValueError("RopeConfig.angle_precision is %r: expected 'exact' or 'float32'"
                             % (self.angle_precision,))
        if self.scaling is not None and not isinstance(self.scaling, SCALINGS):
            raise TypeError("RopeConfig.scaling is a %s: expected one of %s or None"
                            % (type(self.scaling).__name__, ", ".join(c.__name__ for c in SCALINGS)))
        if self.mrope is not None and not isinstance(self.mrope, Mrope):
            raise TypeError("RopeConfig.mrope is a %s: expected ropeserve.Mrope or None"
                            % type(self.mrope).__name__)
        if self.no_rope is not None and not isinstance(self.no_rope, NoRope):
            raise TypeError("RopeConfig.no_rope is a %s: expected ropeserve.NoRope or None"
                            % type(self.no_rope).__name__)
        if (self.hf_config_json is not None or self.hf_layer_type is not None) and not _proto.HAS_HF_CONFIG:
            raise _hf_unsupported("RopeConfig.hf_config_json")
        if self.axial is not None:
            if not isinstance(self.axial, AxialRope):
                raise TypeError("RopeConfig.axial is a %s: expected ropeserve.AxialRope or None"
                                % type(self.axial).__name__)
            if not _proto.HAS_AXIAL:
                raise Unimplemented("RopeConfig.axial: this ropeserve package was built from a "
                                    "rope.proto without it; rebuild the package")

    def __repr__(self):
        # A config.json is shown by its size and model_type, not its text.
        parts = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None or (field.name == "layout" and value is Layout.INTERLEAVED
                                 and self.hf_config_json is None) or (
                                     field.name == "angle_precision" and value == "exact") or (
                                     field.name == "mrope_ernie_3d" and not value):
                continue
            if field.name == "hf_config_json":
                parts.append("hf_config_json=<%s>" % _describe_json(value))
            elif field.name == "layout":
                parts.append("layout=%s" % value.value)
            else:
                parts.append("%s=%r" % (field.name, value))
        return "RopeConfig(%s)" % ", ".join(parts)

    def to_proto(self):
        """A new rope.v1.RopeConfig message."""
        return pb.RopeConfig.FromString(self.serialized())

    def serialized(self):
        """The rope.v1.RopeConfig message, serialized (made once per config)."""
        cached = self.__dict__.get("_proto_bytes")
        if cached is None:
            message = pb.RopeConfig()
            for name in ("head_dim", "max_len", "theta", "rotary_dim", "hf_config_json", "hf_layer_type",
                         "rotary_offset", "hf_layer_index"):
                value = getattr(self, name)
                if value is not None:
                    _set_field(message, "RopeConfig", name, value)
            message.layout = pb.Layout.Value(self.layout.name)
            message.angle_precision = _ANGLE_PRECISIONS[self.angle_precision]
            if self.scaling is not None:
                _scaling_to_proto(self.scaling, message)
            if self.mrope is not None:
                _set_field(message.mrope, "RopeConfig.mrope", "section", self.mrope.section)
                message.mrope.interleaved = bool(self.mrope.interleaved)
            if self.mrope_ernie_3d:
                message.mrope_ernie_3d = True
            if self.no_rope is not None:
                message.no_rope.SetInParent()  # present even with no tuning
                for name in ("floor_scale", "attn_scale"):
                    value = getattr(self.no_rope, name)
                    if value is not None:
                        _set_field(message.no_rope, "RopeConfig.no_rope", name, value)
            if self.axial is not None:
                message.axial.SetInParent()
                for axis in self.axial.axes:
                    added = message.axial.axes.add()
                    for field in dataclasses.fields(axis):
                        value = getattr(axis, field.name)
                        if value is not None:
                            _set_field(added, "RopeConfig.axial.axes", field.name, value)
            cached = message.SerializeToString()
            # Frozen: the serialized form cannot go stale. Kept outside the
            # dataclass fields, so equality and hashing ignore it.
            self.__dict__["_proto_bytes"] = cached
        return cached

    @classmethod
    def from_proto(cls, message):
        """The RopeConfig of a rope.v1.RopeConfig message."""
        values = dict(
            head_dim=message.head_dim,
            max_len=message.max_len,
            theta=message.theta or None,
            rotary_dim=message.rotary_dim or None,
            layout=Layout.of(message.layout),
            scaling=_scaling_from_proto(message),
            mrope=(Mrope(tuple(message.mrope.section), message.mrope.interleaved)
                   if message.HasField("mrope") else None),
            rotary_offset=message.rotary_offset or None,
            mrope_ernie_3d=message.mrope_ernie_3d,
            no_rope=(NoRope(message.no_rope.floor_scale or None, message.no_rope.attn_scale or None)
                     if message.HasField("no_rope") else None),
            angle_precision=("float32" if message.angle_precision == pb.ANGLE_FLOAT32 else "exact"))
        if _proto.HAS_HF_CONFIG:
            values["hf_config_json"] = message.hf_config_json or None
            values["hf_layer_type"] = message.hf_layer_type or None
            values["hf_layer_index"] = (message.hf_layer_index
                                        if message.HasField("hf_layer_index") else None)
        if _proto.HAS_AXIAL and message.HasField("axial"):
            values["axial"] = AxialRope(tuple(
                RopeAxis(a.dim, a.theta or None, a.theta_rescale or None, a.interpolation or None)
                for a in message.axial.axes))
        return cls(**values)

    def replace(self, **changes):
        """A copy with some fields changed (dataclasses.replace)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_hf(cls, source, layer_type=None, *, max_len=None, layout=None):
        """A config whose rope parameters the server derives from a model's config.json.

        source: a dict, a path to a config.json, or a directory holding one.
        layer_type: "full_attention" (the default) or "sliding_attention"
            (Gemma 3's local layers), sent as hf_layer_type.
        max_len: the table length; default: the config's
            max_position_embeddings (also under text_config).
        layout: default: the layout transformers' modeling code uses for the
            config's model_type (HALF, rotate_half, for most; INTERLEAVED for
            GPT-J, GLM, Cohere, DeepSeek V2/V3, Llama 4, ...; an explicit
            rope_interleave key wins), the rule ropectl and ropeload follow.

        The server reads rope_theta, rope_scaling / rope_parameters,
        partial_rotary_factor, head_dim, ... with transformers' formulas; see
        Client.resolve() for what it derived. Raises ropeserve.Unimplemented
        while rope.proto lacks RopeConfig.hf_config_json.
        """
        if not _proto.HAS_HF_CONFIG:
            raise _hf_unsupported("RopeConfig.from_hf")
        text, parsed = read_hf_config(source)
        if layout is None:
            layout, _ = hf_layout(parsed)
        if max_len is None:
            max_len = hf_max_position_embeddings(parsed)
            if max_len is None:
                raise ValueError("RopeConfig.from_hf: the config has no max_position_embeddings: "
                                 "pass max_len=")
        return cls(head_dim=0, max_len=max_len, layout=layout, hf_config_json=text,
                   hf_layer_type=layer_type)


def _describe_json(text):
    """"855 bytes, model_type llama" for a config.json's text."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    model_type = _top_or_text(parsed, "model_type") if isinstance(parsed, dict) else None
    return "%d bytes%s" % (len(text.encode("utf-8")),
                           ", model_type %s" % model_type if isinstance(model_type, str) else "")


def _hf_unsupported(what):
    return Unimplemented(
        "%s: this ropeserve package was built from a rope.proto without RopeConfig.hf_config_json "
        "/ hf_layer_type, so the server cannot be asked to read a config.json; rebuild the package "
        "from a ropeserve whose rope.proto has them" % what)


def read_hf_config(source):
    """(JSON text, parsed dict) of a config.json given as a dict, file or model directory."""
    if isinstance(source, dict):
        return json.dumps(source), source
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError("from_hf: source is a %s: expected a dict, or the path of a config.json "
                        "or of a model directory" % type(source).__name__)
    path = os.fspath(source)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError("from_hf: %s is not JSON: %s" % (path, e)) from None
    if not isinstance(parsed, dict):
        raise ValueError("from_hf: %s holds a JSON %s, not an object" % (path, type(parsed).__name__))
    return text, parsed


def hf_max_position_embeddings(parsed):
    """max_position_embeddings of a config.json dict (top level, else text_config; absent,
    the value of transformers' config class where published configs leave it out: gemma3);
    None if absent otherwise."""
    value = _top_or_text(parsed, "max_position_embeddings")
    if value is None:
        return _CLASS_MAX_POSITION_EMBEDDINGS.get(_top_or_text(parsed, "model_type"))
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
