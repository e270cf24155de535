"""Drop-ins for the rotary embeddings of image and video diffusion models, computed by ropeserve.

Flux.1 (black-forest-labs/flux, src/flux/modules/layers.py and math.py):

    pe_embedder = EmbedND(dim=128, theta=10000, axes_dim=[16, 56, 56])
    pe = pe_embedder(ids)                   # ids [B, L, 3]: txt_ids then img_ids
    q, k = apply_rope(q, k, pe)             # q, k [B, H, L, 128]

becomes

    from ropeserve.diffusion import RemoteEmbedND, apply_rope
    pe_embedder = RemoteEmbedND(client, dim=128, theta=10000, axes_dim=[16, 56, 56])
    pe = pe_embedder(ids)
    q, k = apply_rope(q, k, pe)

Wan 2.1 (Wan-Video/Wan2.1, wan/modules/model.py):

    x = rope_apply(x, grid_sizes, freqs)    # x [B, L, N, D], grid_sizes [B, 3]

becomes

    rope_apply = ropeserve.diffusion.WanRopeApply(client)   # theta 10000, as rope_params
    x = rope_apply(x, grid_sizes, freqs)    # freqs is accepted and not needed

Both compute in float32 from the tables of the server (exact to float32
rounding), where the published code computes its angles in float64; the
results agree to float32 rounding. Needs torch.
"""

import math

import numpy as np
import torch

from .config import AxialRope, Layout, RopeConfig
from .positions import Grid


def _table_length(largest):
    """A power of two above the largest position (at least 1024): few distinct tables."""
    return max(1024, 1 << int(math.ceil(math.log2(largest + 2))))


class RemotePositions:
    """What RemoteEmbedND returns: the config and the positions [n_axes, B, L] to rotate by."""

    def __init__(self, client, config, positions):
        self.client, self.config, self.positions = client, config, positions

    def rotate(self, xq, xk):
        """Flux's apply_rope on xq, xk [B, H, L, D]: rotated copies of their dtype."""
        for name, x in (("xq", xq), ("xk", xk)):
            if not isinstance(x, torch.Tensor) or x.dim() != 4:
                raise ValueError("%s must be a [B, H, L, D] torch tensor" % name)
        positions = self.positions
        if positions.shape[1] != xq.shape[0]:
            if positions.shape[1] != 1:
                raise ValueError("the ids have batch %d but xq has %d" % (positions.shape[1], xq.shape[0]))
            positions = positions[:, 0]  # shared by every batch row: [n_axes, L]
        q_out, k_out = self.client.rotate(xq.transpose(1, 2), xk.transpose(1, 2), config=self.config,
                                          positions=positions)
        return q_out.transpose(1, 2), k_out.transpose(1, 2)


class RemoteEmbedND(torch.nn.Module):
    """Flux's EmbedND(dim, theta, axes_dim), served: forward(ids) -> RemotePositions.

    ids: [B, L, n_axes] positions (Flux: txt_ids then img_ids, float); each
    axis i rotates axes_dim[i] consecutive features of the head, pairs
    interleaved, as Flux's rope() and apply_rope() do. Integer-valued ids
    use the server's cached tables; others are computed directly.
    """

    def __init__(self, client, dim, theta, axes_dim):
        super().__init__()
        if sum(axes_dim) != dim:
            raise ValueError("axes_dim %s sums to %d, not dim %d" % (list(axes_dim), sum(axes_dim), dim))
        self.client = client
        self.dim = int(dim)
        self.theta = float(theta)
        self.axes_dim = tuple(int(d) for d in axes_dim)

    def forward(self, ids):
        ids = ids.detach().to("cpu", torch.float64) if isinstance(ids, torch.Tensor) else \
            torch.as_tensor(np.asarray(ids, dtype=np.float64))
        if ids.dim() != 3 or ids.shape[-1] != len(self.axes_dim):
            raise ValueError("ids has shape %s: expected [B, L, %d]" % (list(ids.shape), len(self.axes_dim)))
        positions = ids.permute(2, 0, 1).contiguous().numpy()  # [n_axes, B, L]
        if np.all(positions == np.floor(positions)):
            positions = positions.astype(np.int64)
        config = RopeConfig(head_dim=self.dim, max_len=_table_length(float(positions.max(initial=0))),
                            theta=self.theta, layout=Layout.INTERLEAVED,
                            axial=AxialRope(self.axes_dim))
        return RemotePositions(self.client, config, positions)


def apply_rope(xq, xk, freqs_cis):
    """Flux's apply_rope(xq, xk, freqs_cis) for the RemotePositions of RemoteEmbedND."""
    if not isinstance(freqs_cis, RemotePositions):
        raise TypeError("freqs_cis is a %s: expected what RemoteEmbedND returns"
                        % type(freqs_cis).__name__)
    return freqs_cis.rotate(xq, xk)


class WanRopeApply:
    """Wan 2.1's rope_apply(x, grid_sizes, freqs), served.

    x: [B, L, N, D] (D = 2c); grid_sizes: [B, 3] (frames, height, width in
    patches) per sample. The first f*h*w tokens of sample i rotate by their
    (frame, row, column) on Wan's axes of c - 2(c // 3), c // 3 and c // 3
    pairs (theta 10000, pairs interleaved as view_as_complex); the rest pass
    through. Returns float32, as rope_apply does.
    """

    def __init__(self, client, theta=10000.0, max_len=1024):
        self.client = client
        self.theta = float(theta)
        self.max_len = int(max_len)  # rope_params(1024, ...): positions below 1024

    def __call__(self, x, grid_sizes, freqs=None):
        del freqs  # the server holds the tables rope_params would make
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError("x must be a [B, L, N, D] torch tensor")
        head_dim = x.shape[3]
        config = RopeConfig(head_dim=head_dim, max_len=self.max_len, theta=self.theta,
                            layout=Layout.INTERLEAVED, axial=AxialRope.wan(head_dim))
        sizes = grid_sizes.tolist() if isinstance(grid_sizes, torch.Tensor) else list(grid_sizes)
        out = []
        for i, (f, h, w) in enumerate(sizes):
            seq_len = f * h * w
            rotated, _ = self.client.rotate(x[i:i + 1, :seq_len].float().contiguous(), config=config,
                                            build=[Grid((f, h, w))])
            out.append(torch.cat([rotated[0], x[i, seq_len:].float()]))
        return torch.stack(out)
