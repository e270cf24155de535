#!/usr/bin/python3
"""Image and video models' positional encodings through a real ropeserve, against
float64 / integer re-implementations of the published code, written here from
that code's semantics and sharing nothing with the server:

  1. Flux.1 (black-forest-labs/flux: EmbedND, rope, apply_rope) through
     ropeserve.diffusion.RemoteEmbedND / apply_rope and a plain axial Rotate,
     on text + image ids, and Flux Kontext's reference-image offset;
  2. Wan 2.1 (Wan-Video/Wan2.1: rope_params, rope_apply) through
     ropeserve.diffusion.WanRopeApply, on random video grids with padding;
  3. HunyuanVideo (get_1d_rotary_pos_embed with theta_rescale_factor and
     interpolation_factor, get_meshgrid_nd's linspace grids,
     get_nd_rotary_pos_embed, apply_rotary_emb): fractional positions built
     by the server from a grid with start and step;
  4. SAM 2 (compute_axial_cis, apply_rotary_enc) and Llama 4's vision
     encoder (Llama4VisionRotaryEmbedding: positions + 1, the class token
     last at 0): grids with rope_axis [1, 0];
  5. transformers' get_rope_index, both the 4.5x form and the 5.x one
     (rope_index_layout TRANSFORMERS_5: runs of mm_token_type_ids), for
     Qwen2-VL, Qwen2.5-VL and Qwen3-VL on random text / image / video
     mixes, batches with left and
     right padding: BuildPositions' positions and rope_deltas exactly, the
     decode positions after them, and Rotate with build_positions
     bit-identical to Rotate with the re-implementation's positions;
  6. ropectl positions and rotate --axial_dims --grid.

Rotations are compared with float32 tolerance (the server stores float32
rows exact to float32 rounding; the published code computes in float64 or
float32). Exit status: 0 pass, 1 fail, 77 skipped (no torch / numpy / grpcio).
"""

import argparse
import itertools
import json
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    import grpc  # noqa: F401  (the client package needs it)
except ImportError as e:  # pragma: no cover - depends on the machine
    print("SKIP: %s is not available to %s" % (e.name, sys.executable))
    sys.exit(77)


class Failure(Exception):
    pass


def close(name, got, want, tol):
    got = torch.as_tensor(got, dtype=torch.float64)
    want = torch.as_tensor(want, dtype=torch.float64)
    if got.shape != want.shape:
        raise Failure("%s: shape %s, want %s" % (name, list(got.shape), list(want.shape)))
    err = (got - want).abs().max().item()
    if not err <= tol:
        raise Failure("%s: max error %.3g > %.3g" % (name, err, tol))
    return err


# ---- Flux.1: EmbedND ------------------------------------------------------------------

def flux_rope(pos, dim, theta):
    """Flux's rope(): [B, L, dim/2, 2, 2] rotation matrices, angles in float64."""
    scale = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    omega = 1.0 / (theta ** scale)
    out = pos.to(torch.float64)[..., None] * omega
    return torch.stack([torch.cos(out), -torch.sin(out), torch.sin(out), torch.cos(out)],
                       dim=-1).reshape(*out.shape, 2, 2)


def flux_embed_nd(ids, theta, axes_dim):
    """EmbedND.forward: the axes' rotations one after the other, [B, 1, L, D/2, 2, 2]."""
    return torch.cat([flux_rope(ids[..., i], axes_dim[i], theta) for i in range(len(axes_dim))],
                     dim=-3).unsqueeze(1)


def flux_apply_rope(x, pe):
    """apply_rope on one tensor [B, H, L, D], in float64 here."""
    x_ = x.to(torch.float64).reshape(*x.shape[:-1], -1, 1, 2)
    out = pe[..., 0] * x_[..., 0] + pe[..., 1] * x_[..., 1]
    return out.reshape(*x.shape)


def flux_ids(batch, text_len, h, w, index=0, h_offset=0, w_offset=0):
    """txt_ids (zeros) then img_ids (index, row + h_offset, column + w_offset), [B, L, 3]."""
    img = torch.zeros(h, w, 3)
    img[..., 0] = index
    img[..., 1] = img[..., 1] + torch.arange(h)[:, None] + h_offset
    img[..., 2] = img[..., 2] + torch.arange(w)[None, :] + w_offset
    ids = torch.cat([torch.zeros(text_len, 3), img.reshape(h * w, 3)])
    return ids[None].expand(batch, -1, -1).contiguous()


def check_flux(client, ropeserve):
    from ropeserve.diffusion import RemoteEmbedND, apply_rope
    torch.manual_seed(1)
    theta, axes_dim = 10000, [16, 56, 56]
    for ids in (flux_ids(2, 5, 6, 7), flux_ids(1, 3, 4, 4, index=1, h_offset=6, w_offset=6)):
        b, l = ids.shape[0], ids.shape[1]
        xq = torch.randn(b, 3, l, 128)
        xk = torch.randn(b, 3, l, 128)
        pe = flux_embed_nd(ids, theta, axes_dim)
        want_q, want_k = flux_apply_rope(xq, pe), flux_apply_rope(xk, pe)
        got_q, got_k = apply_rope(xq, xk, RemoteEmbedND(client, 128, theta, axes_dim)(ids))
        close("flux apply_rope q", got_q, want_q, 2e-5)
        close("flux apply_rope k", got_k, want_k, 2e-5)
        # The same through Rotate with the server's grid form (the ids of
        # one row are text [L, 1, 1] at step 0, then the image [1, H, W]).
        config = ropeserve.RopeConfig(head_dim=128, max_len=1024, theta=float(theta),
                                      axial=ropeserve.AxialRope.flux())
        positions = client.build_positions([ropeserve.Grid((5, 1, 1), step=(0, 0, 0)),
                                            ropeserve.Grid((1, 6, 7))]).positions \
            if l == 5 + 42 else None
        if positions is not None:
            if not np.array_equal(positions, ids[0].permute(1, 0).numpy().astype(np.int64)):
                raise Failure("flux: BuildPositions' grids differ from Flux's ids")
            q_rot, _ = client.rotate(xq.transpose(1, 2).contiguous(), config=config,
                                     build=[ropeserve.Grid((5, 1, 1), step=(0, 0, 0)),
                                            ropeserve.Grid((1, 6, 7))])
            close("flux grid rotate", q_rot.transpose(1, 2), want_q, 2e-5)
    print("ok  Flux.1 EmbedND / apply_rope (text + image ids, Kontext offsets)")


# ---- Wan 2.1: rope_params, rope_apply ----------------------------------------------------

def wan_rope_params(max_seq_len, dim, theta=10000):
    freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float64),
                        1.0 / torch.pow(theta, torch.arange(0, dim, 2, dtype=torch.float64).div(dim)))
    return torch.polar(torch.ones_like(freqs), freqs)


def wan_rope_apply(x, grid_sizes, freqs):
    n, c = x.size(2), x.size(3) // 2
    parts = freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
    out = []
    for i, (f, h, w) in enumerate(grid_sizes.tolist()):
        seq_len = f * h * w
        x_i = torch.view_as_complex(x[i, :seq_len].to(torch.float64).reshape(seq_len, n, -1, 2))
        freqs_i = torch.cat([parts[0][:f].view(f, 1, 1, -1).expand(f, h, w, -1),
                             parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
                             parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1)],
                            dim=-1).reshape(seq_len, 1, -1)
        x_i = torch.view_as_real(x_i * freqs_i).flatten(2)
        out.append(torch.cat([x_i, x[i, seq_len:].to(torch.float64)]))
    return torch.stack(out)


def check_wan(client, rng):
    from ropeserve.diffusion import WanRopeApply
    d = 128
    freqs = torch.cat([wan_rope_params(1024, d - 4 * (d // 6)),
                       wan_rope_params(1024, 2 * (d // 6)),
                       wan_rope_params(1024, 2 * (d // 6))], dim=1)
    remote = WanRopeApply(client)
    for _ in range(3):
        grids = torch.tensor([[int(rng.integers(1, 5)), int(rng.integers(1, 9)), int(rng.integers(1, 9))]
                              for _ in range(2)])
        length = int(grids.prod(dim=1).max()) + int(rng.integers(0, 4))  # padded samples
        x = torch.randn(2, length, 2, d)
        close("wan rope_apply", remote(x, grids, freqs), wan_rope_apply(x, grids, freqs), 2e-5)
    print("ok  Wan 2.1 rope_apply (random grids, padding)")


# ---- HunyuanVideo: get_nd_rotary_pos_embed ------------------------------------------------

def hunyuan_1d(dim, pos, theta, theta_rescale_factor, interpolation_factor):
    """get_1d_rotary_pos_embed(use_real=True), in float64: cos, sin [S, dim]."""
    if theta_rescale_factor != 1.0:
        theta = theta * theta_rescale_factor ** (dim / (dim - 2))
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: dim // 2] / dim))
    freqs = torch.outer(pos.to(torch.float64) * interpolation_factor, freqs)
    return freqs.cos().repeat_interleave(2, dim=1), freqs.sin().repeat_interleave(2, dim=1)


def hunyuan_meshgrid(start, stop, num):
    """get_meshgrid_nd(start, stop, num): linspace(a, b, n + 1)[:n] per axis, in float64."""
    axes = [torch.linspace(a, b, n + 1, dtype=torch.float64)[:n] for a, b, n in zip(start, stop, num)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=0)


def hunyuan_nd(rope_dim_list, start, stop, num, theta, rescale, interpolation):
    grid = hunyuan_meshgrid(start, stop, num)
    cos, sin = zip(*[hunyuan_1d(rope_dim_list[i], grid[i].reshape(-1), theta, rescale[i], interpolation[i])
                     for i in range(len(rope_dim_list))])
    return torch.cat(cos, dim=1), torch.cat(sin, dim=1)


def hunyuan_apply(x, cos, sin):
    """apply_rotary_emb (head_first False, real form): x [B, S, H, D]."""
    x = x.to(torch.float64)
    real, imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    rotated = torch.stack([-imag, real], dim=-1).flatten(3)
    return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]


def check_hunyuan(client, ropeserve):
    torch.manual_seed(3)
    rope_dim_list, theta = [16, 56, 56], 256.0
    rescale, interpolation = [1.0, 2.0, 1.0], [1.0, 1.0, 0.5]
    start, stop, num = (0, 1.5, 0), (3, 4.0, 5), (3, 4, 6)
    cos, sin = hunyuan_nd(rope_dim_list, start, stop, num, theta, rescale, interpolation)
    x = torch.randn(1, int(np.prod(num)), 2, 128)
    want = hunyuan_apply(x, cos, sin)
    axial = ropeserve.AxialRope(tuple(
        ropeserve.RopeAxis(d, theta_rescale=r, interpolation=i)
        for d, r, i in zip(rope_dim_list, rescale, interpolation)))
    config = ropeserve.RopeConfig(head_dim=128, max_len=64, theta=theta, axial=axial)
    grid = ropeserve.Grid(num, start=start, step=[(b - a) / n for a, b, n in zip(start, stop, num)])
    built = client.build_positions([grid]).positions
    if built.dtype != np.float64:
        raise Failure("hunyuan: the linspace grid gave integer positions")
    close("hunyuan grid", torch.from_numpy(built), hunyuan_meshgrid(start, stop, num).reshape(3, -1), 1e-12)
    got, _ = client.rotate(x, config=config, build=[grid])
    close("hunyuan rotate", got, want, 2e-5)
    # Causal attention over the fractional positions: masked by sequence index (the last
    # 8 tokens' queries against every key, as a decode window sees them), rotated by the
    # positions; torch reference in float64.
    k = torch.randn(1, x.shape[1], 2, 128)
    v = torch.randn(1, x.shape[1], 2, 16)
    kr = hunyuan_apply(k, cos, sin)
    n, window = x.shape[1], 8
    scores = torch.einsum("bihd,bjhd->bhij", want[:, n - window:], kr) / np.sqrt(128)
    hidden = torch.arange(n)[None, :] > torch.arange(n - window, n)[:, None]
    probs = scores.masked_fill(hidden, float("-inf")).softmax(-1)
    output = torch.einsum("bhij,bjhd->bihd", probs, v.to(torch.float64))
    fractional = torch.from_numpy(built)
    attention = client.attention_scores(
        x[:, n - window:], k, v, config=config, causal=True, softmax=True,
        q_start_pos=n - window, q_fractional_positions=fractional[:, n - window:].numpy(),
        k_fractional_positions=fractional.numpy())
    close("hunyuan causal attention probabilities", attention.scores, probs, 2e-5)
    close("hunyuan causal attention output", attention.output, output, 2e-5)
    print("ok  HunyuanVideo get_nd_rotary_pos_embed (linspace grid, rescale, interpolation; causal "
          "attention over its fractional positions)")


# ---- SAM 2 and Llama 4's vision encoder ---------------------------------------------------

def sam2_axial_cis(dim, end_x, end_y, theta=10000.0):
    t = torch.arange(end_x * end_y, dtype=torch.float64)
    t_x, t_y = t % end_x, torch.div(t, end_x, rounding_mode="floor")
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 4, dtype=torch.float64)[: dim // 4] / dim))
    return torch.cat([torch.polar(torch.ones(len(t), len(freqs), dtype=torch.float64), torch.outer(t_x, freqs)),
                      torch.polar(torch.ones(len(t), len(freqs), dtype=torch.float64), torch.outer(t_y, freqs))],
                     dim=-1)


def complex_apply(x, freqs_cis):
    """view_as_complex pairs (x[2i], x[2i+1]) times freqs_cis [S, D/2]: x [B, S, H, D]."""
    xc = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * freqs_cis[None, :, None, :]).flatten(3)


def llama4_vision_freqs(idx, head_dim, theta):
    """Llama4VisionRotaryEmbedding's freqs_ci: [idx^2 + 1, head_dim/2], the class token last."""
    img_idx = torch.arange(idx ** 2).reshape(idx ** 2, 1)
    img_idx = torch.cat([img_idx, img_idx[:1]], dim=0)
    img_idx[-1, -1] = -2
    fx, fy = img_idx % idx, img_idx // idx
    freq_dim = head_dim // 2
    rope_freq = 1.0 / (theta ** (torch.arange(0, freq_dim, 2, dtype=torch.float64)[: freq_dim // 2] / freq_dim))
    freqs_x = ((fx + 1)[..., None] * rope_freq[None, None, :]).repeat_interleave(2, dim=-1)
    freqs_y = ((fy + 1)[..., None] * rope_freq[None, None, :]).repeat_interleave(2, dim=-1)
    freqs = torch.cat([freqs_x, freqs_y], dim=-1)[..., ::2]
    freqs = freqs.masked_fill(img_idx.reshape(-1, 1, 1) < 0, 0)
    return torch.polar(torch.ones_like(freqs), freqs)[:, 0, :]


def check_patch_grids(client, ropeserve):
    torch.manual_seed(4)
    # SAM 2: head 64, a 5 x 3 grid (end_x 3 columns, end_y 5 rows).
    x = torch.randn(1, 15, 2, 64)
    config = ropeserve.RopeConfig(head_dim=64, max_len=64, theta=10000.0, axial=ropeserve.AxialRope.sam2(64))
    got, _ = client.rotate(x, config=config, build=[ropeserve.Grid((5, 3), rope_axis=(1, 0))])
    close("sam2", got, complex_apply(x, sam2_axial_cis(64, 3, 5)), 2e-5)
    # Llama 4 vision: head 88 (1408 / 16), idx 4: 16 patches and the class token.
    x = torch.randn(1, 17, 2, 88)
    config = ropeserve.RopeConfig(head_dim=88, max_len=64, theta=10000.0, axial=ropeserve.AxialRope((44, 44)))
    grids = [ropeserve.Grid((4, 4), start=(1, 1), rope_axis=(1, 0)), ropeserve.Grid((1, 1), step=(0, 0))]
    got, _ = client.rotate(x, config=config, build=grids)
    close("llama4 vision", got, complex_apply(x, llama4_vision_freqs(4, 88, 10000.0)), 2e-5)
    print("ok  SAM 2 compute_axial_cis, Llama 4 vision rotary (grids with rope_axis)")


# ---- transformers' get_rope_index (4.5x) ----------------------------------------------------

PAD = 151643


def get_rope_index(cfg, input_ids, attention_mask, image_grid_thw, video_grid_thw, second_per_grid_ts):
    """get_rope_index of Qwen2-VL / Qwen2.5-VL / Qwen3-VL (model_type picks), integer arithmetic
    except Qwen2.5-VL's time index (k * second_per_grid_t * tokens_per_second, truncated)."""
    model_type = cfg["model_type"]
    merge = cfg["vision_config"].get("spatial_merge_size", 2)
    tps = cfg["vision_config"].get("tokens_per_second", 4)
    image_id, video_id, start_id = cfg["image_token_id"], cfg["video_token_id"], cfg["vision_start_token_id"]
    if model_type.startswith("qwen3_vl") and video_grid_thw is not None:
        video_grid_thw = [[1, h, w] for t, h, w in video_grid_thw for _ in range(t)]
    batch, seq = input_ids.shape
    if image_grid_thw is None and video_grid_thw is None:
        if attention_mask is not None:
            pos = attention_mask.cumsum(-1) - 1
            pos[attention_mask == 0] = 1
            deltas = pos.max(axis=-1) + 1 - seq
            return np.broadcast_to(pos, (3, batch, seq)).copy(), deltas
        return np.broadcast_to(np.arange(seq), (3, batch, seq)).copy(), np.zeros(batch, np.int64)
    if attention_mask is None:
        attention_mask = np.ones_like(input_ids)
    position_ids = np.ones((3, batch, seq), np.int64)
    deltas = []
    image_index = video_index = 0
    for i in range(batch):
        tokens = input_ids[i][attention_mask[i] == 1].tolist()
        starts = [j for j, t in enumerate(tokens) if t == start_id]
        image_nums = sum(tokens[j + 1] == image_id for j in starts)
        video_nums = sum(tokens[j + 1] == video_id for j in starts)
        blocks, st = [], 0
        remain_images, remain_videos = image_nums, video_nums
        for _ in range(image_nums + video_nums):
            ed_image = tokens.index(image_id, st) if image_id in tokens and remain_images > 0 else len(tokens) + 1
            ed_video = tokens.index(video_id, st) if video_id in tokens and remain_videos > 0 else len(tokens) + 1
            if ed_image < ed_video:
                t, h, w = image_grid_thw[image_index]
                second = 0.0
                image_index += 1
                remain_images -= 1
                ed = ed_image
            else:
                t, h, w = video_grid_thw[video_index]
                second = 1.0  # Qwen2.5-VL reads it; the others index no seconds
                if model_type == "qwen2_5_vl" and second_per_grid_ts is not None:
                    second = second_per_grid_ts[video_index]
                video_index += 1
                remain_videos -= 1
                ed = ed_video
            gt, gh, gw = t, h // merge, w // merge
            text_len = ed - st
            st_idx = blocks[-1].max() + 1 if blocks else 0
            blocks.append(np.broadcast_to(np.arange(text_len), (3, text_len)) + st_idx)
            k = np.repeat(np.arange(gt), gh * gw)
            if model_type == "qwen2_5_vl":
                t_index = np.array([int(kk * second * tps) for kk in k], np.int64)
            else:
                t_index = k
            h_index = np.tile(np.repeat(np.arange(gh), gw), gt)
            w_index = np.tile(np.arange(gw), gt * gh)
            blocks.append(np.stack([t_index, h_index, w_index]) + text_len + st_idx)
            st = ed + gt * gh * gw
        if st < len(tokens):
            st_idx = blocks[-1].max() + 1 if blocks else 0
            text_len = len(tokens) - st
            blocks.append(np.broadcast_to(np.arange(text_len), (3, text_len)) + st_idx)
        llm = np.concatenate(blocks, axis=1)
        position_ids[:, i, attention_mask[i] == 1] = llm
        deltas.append(llm.max() + 1 - seq)
    return position_ids, np.array(deltas, np.int64)


def get_rope_index_v5(cfg, input_ids, attention_mask, image_grid_thw, video_grid_thw,
                      second_per_grid_ts):
    """get_rope_index of transformers 5.x (Qwen2-VL / Qwen2.5-VL / Qwen3-VL): the processor's
    mm_token_type_ids (image token 1, video token 2, else 0) grouped into runs, each vision run
    one grid at the current position, which then moves on by max(h, w) // merge; padding 0 and
    deltas against the unmasked tokens. Without grids: generation's cumsum(mask) - 1 (padding 0)
    and deltas 0."""
    model_type = cfg["model_type"]
    merge = cfg["vision_config"].get("spatial_merge_size", 2)
    tps = cfg["vision_config"].get("tokens_per_second", 4)
    batch, seq = input_ids.shape
    if image_grid_thw is None and video_grid_thw is None:
        if attention_mask is not None:
            pos = attention_mask.cumsum(-1) - 1
            pos[attention_mask == 0] = 0
        else:
            pos = np.broadcast_to(np.arange(seq), (batch, seq))
        return np.broadcast_to(pos, (3, batch, seq)).copy(), np.zeros(batch, np.int64)
    if model_type.startswith("qwen3_vl") and video_grid_thw is not None:
        video_grid_thw = [[1, h, w] for t, h, w in video_grid_thw for _ in range(t)]
    types = np.where(input_ids == cfg["image_token_id"], 1,
                     np.where(input_ids == cfg["video_token_id"], 2, 0))
    grids = {1: iter(image_grid_thw or []), 2: iter(video_grid_thw or [])}
    seconds = iter(second_per_grid_ts if second_per_grid_ts is not None else [1] * seq)
    position_ids = np.zeros((3, batch, seq), np.int64)
    deltas = []
    for i in range(batch):
        keep = attention_mask[i] == 1 if attention_mask is not None else np.ones(seq, bool)
        parts, current = [], 0
        for kind, run in itertools.groupby(types[i][keep].tolist()):
            n = len(list(run))
            if kind == 0:
                parts.append(np.broadcast_to(np.arange(n) + current, (3, n)))
                current += n
                continue
            t, h, w = next(grids[kind])
            interval = tps * next(seconds) if kind == 2 and model_type == "qwen2_5_vl" else 1.0
            gt, gh, gw = t, h // merge, w // merge
            temporal = (np.arange(gt) * interval).astype(np.int64) + current
            tt, hh, ww = np.meshgrid(temporal, np.arange(gh) + current, np.arange(gw) + current,
                                     indexing="ij")
            parts.append(np.stack([tt.reshape(-1), hh.reshape(-1), ww.reshape(-1)]))
            current += max(h, w) // merge
        llm = np.concatenate(parts, axis=1)
        position_ids[:, i, keep] = llm
        deltas.append(llm.max() + 1 - int(keep.sum()))
    return position_ids, np.array(deltas, np.int64)


def random_sequence(rng, cfg, images, videos, seconds):
    """Token ids of a random text / image / video mix; appends its grids."""
    merge = cfg["vision_config"].get("spatial_merge_size", 2)
    qwen3 = cfg["model_type"].startswith("qwen3_vl")
    ids = []
    for _ in range(int(rng.integers(1, 4))):
        ids += [int(x) for x in rng.integers(10, 1000, size=int(rng.integers(0, 5)))]
        kind = rng.choice(["image", "video", "text"])
        if kind == "text":
            continue
        t = 1 if kind == "image" else int(rng.integers(1, 4))
        h, w = int(rng.integers(1, 4)) * merge + int(rng.integers(0, 2)), int(rng.integers(1, 4)) * merge
        per_frame = (h // merge) * (w // merge)
        if kind == "image":
            images.append([t, h, w])
            ids += [cfg["vision_start_token_id"]] + [cfg["image_token_id"]] * (t * per_frame) + [151653]
        else:
            videos.append([t, h, w])
            seconds.append(float(rng.choice([0.5, 1.0, 2.0 / 3.0, 0.25, 1.5])))
            if qwen3:  # a timestamp, then each frame as its own vision block
                for _ in range(t):
                    ids += [int(rng.integers(10, 1000))]
                    ids += [cfg["vision_start_token_id"]] + [cfg["video_token_id"]] * per_frame + [151653]
            else:
                ids += [cfg["vision_start_token_id"]] + [cfg["video_token_id"]] * (t * per_frame) + [151653]
    ids += [int(x) for x in rng.integers(10, 1000, size=int(rng.integers(1, 4)))]
    return ids


def check_qwen(client, ropeserve, fixtures, rng, version=4):
    cases = 0
    reference = get_rope_index if version == 4 else get_rope_index_v5
    for name in ("Qwen2-VL-7B-Instruct", "Qwen2.5-VL-7B-Instruct", "Qwen3-VL-8B-Instruct"):
        with open(os.path.join(fixtures, name + ".json"), encoding="utf-8") as f:
            text = f.read()
        cfg = json.loads(text)
        for trial in range(12):
            batch = int(rng.integers(1, 4))
            images, videos, seconds = [], [], []
            rows = [random_sequence(rng, cfg, images, videos, seconds) for _ in range(batch)]
            if trial % 4 == 3:  # text only
                rows = [[int(x) for x in rng.integers(10, 1000, size=int(rng.integers(2, 9)))]
                        for _ in range(batch)]
                images, videos, seconds = [], [], []
            seq = max(len(r) for r in rows) + int(rng.integers(0, 3))
            input_ids = np.full((batch, seq), PAD, np.int64)
            mask = np.zeros((batch, seq), np.int64)
            for i, r in enumerate(rows):
                left = trial % 2 == 0  # left padding, else right padding
                s = seq - len(r) if left else 0
                input_ids[i, s:s + len(r)] = r
                mask[i, s:s + len(r)] = 1
            use_mask = mask if (trial % 3 != 2 or not mask.all()) else None
            use_seconds = seconds if (videos and trial % 2 == 0) else None
            want_pos, want_deltas = reference(cfg, input_ids, use_mask, images or None,
                                              videos or None, use_seconds)
            source = ropeserve.TokenPositions(
                input_ids=input_ids, hf_config=text, attention_mask=use_mask,
                image_grid_thw=np.array(images, np.int64).reshape(-1, 3) if images else None,
                video_grid_thw=np.array(videos, np.int64).reshape(-1, 3) if videos else None,
                second_per_grid_ts=use_seconds, transformers_version=version)
            built = client.build_positions(source)
            if not np.array_equal(built.positions, want_pos):
                raise Failure("%s trial %d: positions differ\n got %s\nwant %s"
                              % (name, trial, built.positions.tolist(), want_pos.tolist()))
            if not np.array_equal(built.rope_deltas, want_deltas):
                raise Failure("%s trial %d: rope_deltas %s, want %s"
                              % (name, trial, built.rope_deltas.tolist(), want_deltas.tolist()))
            # Decode: the next token of each row sits at seq + rope_delta on every axis
            # (transformers 5: the row's unmasked tokens + rope_delta, one row a request).
            for row in ([None] if version == 4 else range(batch)):
                deltas = want_deltas if row is None else want_deltas[row:row + 1]
                cached = seq if row is None or use_mask is None else int(use_mask[row].sum())
                decode = client.build_positions(ropeserve.TokenPositions(
                    input_ids=np.zeros((len(deltas), 1), np.int64), hf_config=text,
                    rope_deltas=deltas, cache_position=cached, transformers_version=version))
                if not np.array_equal(decode.positions,
                                      np.broadcast_to(cached + deltas[None, :, None],
                                                      (3, len(deltas), 1))):
                    raise Failure("%s trial %d: decode positions %s"
                                  % (name, trial, decode.positions.tolist()))
            cases += 1
        # Rotate with build_positions equals Rotate with the re-implementation's positions.
        config = ropeserve.RopeConfig.from_hf(json.loads(text), max_len=4096)
        q = torch.randn(batch, seq, 2, 128, dtype=torch.bfloat16)
        by_build, _ = client.rotate(q, config=config, build=source)
        by_positions, _ = client.rotate(q, config=config, positions=want_pos)
        if not torch.equal(by_build, by_positions):
            raise Failure("%s: Rotate with build_positions differs from Rotate with positions" % name)
    print("ok  get_rope_index (transformers %d): %d random Qwen2-VL / Qwen2.5-VL / Qwen3-VL "
          "batches (padding, decode, Rotate with build_positions)" % (version, cases))


def check_ropectl(ropectl, address, fixtures):
    """The CLI: positions of Flux's grids and of a Qwen2.5-VL video, an axial rotate by grids."""
    runs = [
        (["positions", "--grid=2x1x1/step=0,0,0;1x2x2"],
         ["3 axes x 6 rows", "axis 1: 0,0,0,0,1,1", "axis 2: 0,0,0,1,0,1"]),
        (["positions", "--hf_config=" + os.path.join(fixtures, "Qwen2.5-VL-7B-Instruct.json"),
          "--input_ids=1,151652," + ",".join(["151656"] * 8) + ",151653",
          "--video_grid_thw=2,4,4", "--second_per_grid_ts=1.5"],
         ["axis 0: 0,1,2,2,2,2,5,5,5,5,6", "rope_deltas: -4"]),
        (["rotate", "--theta=10000", "--axial_dims=16,56,56", "--random_q_shape=1,6,2,128",
          "--grid=2x1x1/step=0,0,0;1x2x2"],
         ["axial[16,56,56]", "positions: built from grids", "q out: float32 [1,6,2,128]"]),
    ]
    for args, want in runs:
        run = subprocess.run([ropectl] + args + ["--target=" + address], capture_output=True,
                             text=True, timeout=60)
        missing = [w for w in want if w not in run.stdout]
        if run.returncode != 0 or missing:
            raise Failure("ropectl %s: exit %d, missing %s\n%s%s"
                          % (" ".join(args[:1]), run.returncode, missing, run.stdout, run.stderr))
    print("ok  ropectl positions / rotate --axial_dims --grid")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ropeserve", required=True)
    parser.add_argument("--ropectl", required=True)
    parser.add_argument("--fixtures", required=True, help="tests/fixtures/hf_configs")
    args = parser.parse_args()
    from ropeserve_process import RopeServe  # pylint: disable=import-outside-toplevel
    import ropeserve  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(35)
    failures = 0
    with RopeServe(args.ropeserve, ["--backend=cpu", "--cpu_threads=2", "--work_threads=2"]) as rs:
        with ropeserve.Client(rs.address, deadline=60.0) as client:
            checks = [lambda: check_flux(client, ropeserve), lambda: check_wan(client, rng),
                      lambda: check_hunyuan(client, ropeserve),
                      lambda: check_patch_grids(client, ropeserve),
                      lambda: check_qwen(client, ropeserve, args.fixtures, rng),
                      lambda: check_qwen(client, ropeserve, args.fixtures, rng, version=5),
                      lambda: check_ropectl(args.ropectl, rs.address, args.fixtures)]
            for check in checks:
                try:
                    check()
                except (Failure, ropeserve.RopeError) as e:
                    failures += 1
                    print("FAIL %s" % e)
        status = rs.stop()
        if status != 0:
            failures += 1
            print("FAIL ropeserve exited with %s\n%s" % (status, rs.output))
    if failures:
        print("%d failure(s)" % failures)
        return 1
    print("all vision / video model checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
