"""Random projections for random-feature maps: seeded omega draws (i.i.d. or orthogonal Gaussian, and cos2's phases),
per-head parameters shared across heads, and the projection u = omega^T (alpha x) as one batched product."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from attnbench.errors import ConfigError

RowNorms = Literal["chi", "sqrt-d"]


def project_to_ball(omega: Tensor, radius: float) -> Tensor:
    """Rows (last axis) longer than `radius` scaled back onto the sphere of that radius."""
    norms = omega.norm(dim=-1, keepdim=True)
    return omega * (radius / norms).clamp(max=1.0)


def per_head(t: Tensor, heads: int) -> Tensor:
    """Per-head parameters (H, ...) for a call on `heads` heads: as they are, or one head's expanded to all."""
    if t.shape[0] == heads:
        return t
    if t.shape[0] == 1:
        return t.expand(heads, *t.shape[1:])
    raise ConfigError(
        f"the attention was built with num_heads={t.shape[0]} but called on {heads} heads; build it "
        f"with num_heads={heads}, or with num_heads=1 to share one head's parameters across every head"
    )


def seeded_generator(*keys: int) -> torch.Generator:
    """A CPU generator seeded from several integers (e.g. seed, head, draw), well mixed."""
    state = np.random.SeedSequence([int(k) for k in keys]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def orthogonal_gaussian(
    num_rows: int, dim: int, generator: torch.Generator | None = None, scaling: RowNorms = "chi"
) -> Tensor:
    """Stacked blocks of `dim` orthonormal rows (Haar QR), rescaled -> (num_rows, dim).

    scaling "chi": row norms drawn like Gaussian rows' (chi with dim degrees of freedom), so each row is
    marginally N(0, I); "sqrt-d": every row has norm sqrt(dim) (Performer's deterministic option).
    """
    blocks = []
    for _ in range(math.ceil(num_rows / dim)):
        q, r = torch.linalg.qr(torch.randn(dim, dim, generator=generator))
        blocks.append((q * torch.sign(torch.diagonal(r))).T)  # sign fix makes the block Haar-distributed
    rows = torch.cat(blocks)[:num_rows]
    if scaling == "chi":
        norms = torch.randn(num_rows, dim, generator=generator).norm(dim=1)
    elif scaling == "sqrt-d":
        norms = torch.full((num_rows,), math.sqrt(dim))
    else:
        raise ValueError(f"scaling={scaling!r} is not one of 'chi', 'sqrt-d'")
    return rows * norms[:, None]


def draw_omegas(
    num_heads: int,
    num_features: int,
    dim: int,
    seed: int,
    *,
    orthogonal: bool = True,
    scaling: RowNorms = "chi",
    draw: int = 0,
) -> Tensor:
    """Random frequencies per head -> (H, M, d); head h uses a generator seeded from (seed, h, draw)."""
    out = []
    for head in range(num_heads):
        generator = seeded_generator(seed, head, draw)
        if orthogonal:
            out.append(orthogonal_gaussian(num_features, dim, generator, scaling))
        else:
            out.append(torch.randn(num_features, dim, generator=generator))
    return torch.stack(out)


def draw_phases(num_heads: int, num_features: int, seed: int, draw: int = 0) -> Tensor:
    """cos2's random phases b ~ U[0, 2 pi) per head -> (H, M); head h from a generator seeded (seed, h, draw, 1)."""
    return torch.stack(
        [
            torch.rand(num_features, generator=seeded_generator(seed, head, draw, 1)) * (2 * math.pi)
            for head in range(num_heads)
        ]
    )


def projection_weights(
    omega: Tensor, batch: int, alpha: float = 1.0, dtype: torch.dtype | None = None, heads: int | None = None
) -> Tensor:
    """alpha omega^T laid out for one batched product: omega (H, M, d) -> (batch * heads, d, M) (a view for batch 1
    and H heads); `heads` (default H) expands one head's omegas to every head (`per_head`)."""
    w = (per_head(omega, heads or omega.shape[0]).to(dtype or omega.dtype) * alpha).transpose(-2, -1)
    return w if batch == 1 else w.expand(batch, *w.shape).reshape(-1, *w.shape[1:])


def project(x: Tensor, weights: Tensor, out: Tensor | None = None) -> Tensor:
    """x @ weights as one batched product: x (B, H, N, d), weights (B*H, d, M) from `projection_weights`
    -> (B, H, N, M), written into `out` (B, H, N, M) when given."""
    b, h, n, d = x.shape
    x3 = x.reshape(b * h, n, d)
    if out is None:
        return torch.bmm(x3, weights).view(b, h, n, -1)
    torch.bmm(x3, weights, out=out.view(b * h, n, -1))
    return out
