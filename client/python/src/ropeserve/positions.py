"""Positions the server builds (rope.proto's BuildPositionsRequest).

Two sources, either given to Client.build_positions (which returns the
positions) or to Client.rotate(..., build=...) (which rotates by them
without sending them):

    # Qwen2-VL / Qwen2.5-VL / Qwen3-VL: transformers' get_rope_index
    source = ropeserve.TokenPositions(hf_config="Qwen2.5-VL-7B-Instruct/config.json",
                                      input_ids=ids, attention_mask=mask,
                                      image_grid_thw=image_grid_thw)
    # Axial models: grids of tokens, e.g. Flux's text ids then its image ids
    source = [ropeserve.Grid((512, 1, 1), step=(0, 0, 0)), ropeserve.Grid((1, 64, 64))]
"""

import dataclasses
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from . import _proto
from .config import read_hf_config

pb = _proto.pb


@dataclasses.dataclass(frozen=True)
class Grid:
    """A block of tokens on a grid (rope.proto's PositionGrid).

    Tokens are in row-major order over size (the last dimension fastest);
    the token at index (k_0, .., k_n-1) sits at start[d] + k_d * step[d] on
    RoPE axis rope_axis[d]. None: start 0, step 1, rope_axis 0 .. n-1.
    HunyuanVideo's linspace(a, b, n + 1)[:n] is start a, step (b - a) / n.
    """
    size: Tuple[int, ...]
    start: Optional[Tuple[float, ...]] = None
    step: Optional[Tuple[float, ...]] = None
    rope_axis: Optional[Tuple[int, ...]] = None

    def __post_init__(self):
        object.__setattr__(self, "size", tuple(int(x) for x in self.size))
        for name, kind in (("start", float), ("step", float), ("rope_axis", int)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(kind(x) for x in value))

    def _fill(self, message):
        message.size.extend(self.size)
        if self.start is not None:
            message.start.extend(self.start)
        if self.step is not None:
            message.step.extend(self.step)
        if self.rope_axis is not None:
            message.rope_axis.extend(self.rope_axis)


@dataclasses.dataclass(frozen=True)
class TokenPositions:
    """A Qwen2-VL-family token sequence and its image / video grids (get_rope_index).

    hf_config: the model's config.json (dict, path, model directory, or
        its text); None inside Client.rotate(build=...) means the
        rotation's own RopeConfig.hf_config_json.
    input_ids: [B, S] (or [S]) token ids: numpy, torch or nested lists.
    attention_mask: [B, S] of 0 / 1, or None.
    image_grid_thw, video_grid_thw: [n, 3] (t, h, w) per image / video.
    second_per_grid_ts: Qwen2.5-VL, one per video, or None.
    rope_deltas, cache_position: decode instead: the positions of the S new
        tokens of each row, cache_position + s + rope_deltas[b].
    transformers_version: which release's get_rope_index to follow: 4 (the
        4.5x form, also None) or 5 (runs of image / video tokens; text after
        a block at its start + max(h, w) / merge; padding 0; deltas against
        the unmasked tokens). rope.proto's RopeIndexLayout has the details.
    """
    input_ids: Any
    hf_config: Any = None
    attention_mask: Any = None
    image_grid_thw: Any = None
    video_grid_thw: Any = None
    second_per_grid_ts: Any = None
    rope_deltas: Any = None
    cache_position: int = 0
    transformers_version: Optional[int] = None


class Positions(NamedTuple):
    """BuildPositions' reply as arrays.

    positions: int64 (float64 when some position is not an integer)
        [axes, B, S] for token sequences, [axes, S] for grids: ready for
        Client.rotate(positions=...).
    rope_deltas: int64 [B] (token sequences), else None.
    """
    positions: np.ndarray
    rope_deltas: Optional[np.ndarray]


def _array(name, value, dtype):
    if value is None:
        return None
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    a = np.asarray(value)
    if a.size and dtype is np.int64 and a.dtype.kind not in "iub":
        raise ValueError("%s has dtype %s: expected integers" % (name, a.dtype))
    return a.astype(dtype, copy=False)


def _config_text(hf_config):
    if hf_config is None:
        return None
    if isinstance(hf_config, str) and hf_config.lstrip().startswith("{"):
        return hf_config
    return read_hf_config(hf_config)[0]


def request(source):
    """(rope.v1.BuildPositionsRequest, batch, seq) for a TokenPositions or a sequence of Grid."""
    message = pb.BuildPositionsRequest()
    if isinstance(source, TokenPositions):
        ids = _array("input_ids", source.input_ids, np.int64)
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.ndim != 2:
            raise ValueError("input_ids has rank %d: expected [B, S] or [S]" % ids.ndim)
        text = _config_text(source.hf_config)
        if text is not None:
            message.hf_config_json = text
        message.input_ids.extend(ids.reshape(-1).tolist())
        message.batch = ids.shape[0]
        for name in ("attention_mask", "image_grid_thw", "video_grid_thw", "rope_deltas"):
            value = _array(name, getattr(source, name), np.int64)
            if value is not None:
                getattr(message, name).extend(value.reshape(-1).tolist())
        seconds = _array("second_per_grid_ts", source.second_per_grid_ts, np.float64)
        if seconds is not None:
            message.second_per_grid_ts.extend(seconds.reshape(-1).tolist())
        message.cache_position = int(source.cache_position)
        layouts = {None: pb.ROPE_INDEX_LAYOUT_DEFAULT, 4: pb.ROPE_INDEX_LAYOUT_TRANSFORMERS_4,
                   5: pb.ROPE_INDEX_LAYOUT_TRANSFORMERS_5}
        if source.transformers_version not in layouts:
            raise ValueError("transformers_version is %r: expected None, 4 or 5"
                             % (source.transformers_version,))
        message.rope_index_layout = layouts[source.transformers_version]
        return message, ids.shape[0], ids.shape[1]
    grids = list(source) if not isinstance(source, Grid) else [source]
    if not grids or not all(isinstance(g, Grid) for g in grids):
        raise TypeError("positions source is a %s: expected a ropeserve.TokenPositions or a list of "
                        "ropeserve.Grid" % type(source).__name__)
    for g in grids:
        g._fill(message.grids.add())
    return message, None, None


def decode(reply, batch, seq):
    """Positions of a rope.v1.BuildPositionsResponse."""
    axes = reply.axes
    if len(reply.fractional_positions):
        values = np.array(reply.fractional_positions, dtype=np.float64)
    else:
        values = np.array(reply.positions, dtype=np.int64)
    if batch is not None:
        values = values.reshape(axes, batch, seq)
    else:
        values = values.reshape(axes, -1)
    deltas = np.array(reply.rope_deltas, dtype=np.int64) if len(reply.rope_deltas) else None
    return Positions(values, deltas)
