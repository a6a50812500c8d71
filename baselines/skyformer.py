"""Skyformer (Chen, Zeng, Ji, Yang, NeurIPS 2021, arXiv 2111.00035): a Gaussian kernel in place of softmax,
approximated by a regularised Nystrom method.

Kernelized attention: out = kappa(Q, K) V with the Gaussian kernel kappa(q, k) = exp(-|q - k|^2 / (2 sqrt(p))),
p the head dimension, and no row normalisation (the kernel's own factors exp(-|q|^2 / 2 sqrt(p)) and
exp(-|k|^2 / 2 sqrt(p)) take the place of softmax's 1 / sum_j). kappa(Q, K) is the off-diagonal block of the
positive semi-definite kernel matrix of the 2N rows [Q; K]; Skyformer approximates that matrix by Nystrom
from m landmark rows L drawn uniformly from it (half from the queries, half from the keys, as the authors'
code, pkuzengqi/Skyformer), with the regularised inverse:

    out = kappa(Q, L) (kappa(L, L) + lambda I)^-1 kappa(L, K) V       (authors: m = 128, lambda = 0.1)

in O(N m (p + D) + m^3). The inverse is the authors' Newton-Schulz iteration (6 steps) on the matrix scaled
symmetrically to unit row sums, D^-1/2 A D^-1/2, and scaled back; each matrix starts from its own initial
value (`nystromformer.iterative_pinv`; the authors' code took one maximum over the whole batch).

Our choices where the authors' code gives none or one we do not follow: landmarks are drawn without
replacement among the real tokens (the authors draw with replacement, among the first `non_padding` rows), by
rank among the real tokens, so padding anywhere moves none of them; with m at least twice the real length every
row is a landmark and, with lambda = 0 and an exact inverse, the result is kappa(Q, K) V itself. The authors draw
new landmarks at every call, evaluation included; here the draw is seeded, new at every training call
(`redraw`) and the seed's first draw in evaluation, so evaluation is deterministic. Encoder only: landmarks drawn
from the whole sequence would let a query read later tokens, and the paper defines no causal form.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from attnbench.baselines.nystromformer import iterative_pinv
from attnbench.baselines.random_projections import seeded_generator
from attnbench.kernels.masks import key_padding_mask as padding_mask
from attnbench.options import option, require
from attnbench.registry import AttentionConfig, register_attention

DRAW_BLOCK = 1024  # rank draws come in blocks of this many, one generator each: a prefix of the draw never moves


@dataclasses.dataclass
class SkyformerConfig(AttentionConfig):
    num_landmarks: int = option(
        128, "m: landmark rows drawn from [Q; K], half from the queries, half from the keys (authors: 128)", minimum=2
    )
    regularisation: float = option(
        0.1, "lambda in (kappa(L, L) + lambda I)^-1, the regularised Nystrom inverse (authors: 0.1)", minimum=0.0
    )
    inverse_iterations: int = option(
        6, "Newton-Schulz iterations for that inverse (authors: 6); 0 = an exact solve", minimum=0, maximum=100
    )
    redraw: bool = option(
        True, "draw new landmarks at every training call (as the authors); evaluation always uses the seed's draw"
    )

    def __post_init__(self) -> None:
        require(
            not self.causal,
            "attention 'skyformer' has no causal form (causal=True given): its landmarks are drawn from the whole "
            "sequence; use 'softmax', 'performer' or 'elu-linear' for causal attention",
        )


def gaussian_kernel(x: Tensor, y: Tensor) -> Tensor:
    """exp(-|x_i - y_j|^2 / 2) for rows x (..., N, p), y (..., M, p) -> (..., N, M)."""
    half_x = x.square().sum(-1, keepdim=True) / 2
    half_y = y.square().sum(-1)[..., None, :] / 2
    return torch.exp(x @ y.transpose(-2, -1) - half_x - half_y)


def rank_draws(n: int, *keys: int) -> Tensor:
    """n uniform draws (float64), one per rank among the real tokens, in blocks of DRAW_BLOCK from generators seeded
    by `keys` and the block: the draws of the first n ranks do not depend on how many follow."""
    blocks = [
        torch.rand(DRAW_BLOCK, generator=seeded_generator(*keys, b), dtype=torch.float64)
        for b in range(-(-n // DRAW_BLOCK))
    ]
    return torch.cat(blocks)[:n]


def landmark_positions(real: Tensor, count: int, draws: Tensor) -> tuple[Tensor, Tensor]:
    """`count` positions per sequence drawn uniformly without replacement among its real tokens (real (B, N) bool):
    the real tokens whose rank's draw is smallest. -> positions (B, count) long, valid (B, count) bool (False
    where a sequence has fewer real tokens than `count`)."""
    rank = (real.cumsum(dim=1) - 1).clamp_min(0)
    score = torch.where(real, draws.to(real.device)[rank], torch.inf)
    take = min(count, real.shape[1])
    chosen, positions = score.topk(take, dim=1, largest=False)
    valid = chosen.isfinite()
    missing = count - take
    if missing:
        positions = nn.functional.pad(positions, (0, missing))
        valid = nn.functional.pad(valid, (0, missing))
    return positions, valid


def landmark_rows(q: Tensor, k: Tensor, real: Tensor, count: int, *keys: int) -> tuple[Tensor, Tensor]:
    """Landmark rows (B, H, m, p) of [Q; K], count // 2 from the queries and the rest from the keys, and which are
    real (B, m); the draw is seeded by `keys`."""
    n, p = q.shape[2], q.shape[3]
    rows, valid = [], []
    for part, (x, how_many) in enumerate(((q, count // 2), (k, count - count // 2))):
        positions, ok = landmark_positions(real, how_many, rank_draws(n, *keys, part))
        index = positions[:, None, :, None].expand(x.shape[0], x.shape[1], how_many, p)
        rows.append(x.gather(2, index))
        valid.append(ok)
    return torch.cat(rows, dim=2), torch.cat(valid, dim=1)


def regularised_inverse(a: Tensor, iterations: int) -> Tensor:
    """a^-1 for symmetric positive definite a (..., m, m) with positive entries: an exact solve (iterations 0), else
    Newton-Schulz on D^-1/2 a D^-1/2 (D its row sums), scaled back: a^-1 = D^-1/2 (D^-1/2 a D^-1/2)^-1 D^-1/2."""
    if iterations == 0:
        return torch.linalg.inv(a)
    scale = a.sum(dim=-1).rsqrt()
    inverse = iterative_pinv(scale[..., :, None] * a * scale[..., None, :], iterations)
    return scale[..., :, None] * inverse * scale[..., None, :]


def nystrom_kernel_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    real: Tensor,
    landmarks: Tensor,
    valid: Tensor,
    regularisation: float,
    iterations: int,
) -> Tensor:
    """kappa(Q, L) (kappa(L, L) + lambda I)^-1 kappa(L, K) V: q, k (B, H, N, p) already scaled by p^-1/4, v (B, H, N,
    D), real (B, N), landmarks (B, H, m, p), valid (B, m) -> (B, H, N, D). A landmark that is not valid is cut out:
    zero rows and columns, 1 on its diagonal."""
    keep = valid[:, None, :].to(q.dtype)  # (B, 1, m)
    query_side = gaussian_kernel(q, landmarks) * keep[:, :, None, :]
    key_side = gaussian_kernel(landmarks, k) * keep[..., None] * real[:, None, None, :].to(q.dtype)
    diagonal = keep * regularisation + (1 - keep)  # (B, 1, m), in q's dtype
    core = gaussian_kernel(landmarks, landmarks) * keep[..., None] * keep[:, :, None, :] + torch.diag_embed(diagonal)
    return query_side @ (regularised_inverse(core, iterations) @ (key_side @ v))


@register_attention("skyformer", config=SkyformerConfig, normalised=False, positive_features=False)
class SkyformerAttention(nn.Module):
    """Gaussian-kernel attention kappa(Q, K) V by a regularised Nystrom approximation from sampled landmark rows."""

    def __init__(self, cfg: SkyformerConfig):
        super().__init__()
        self.cfg = cfg
        self.register_buffer("draws", torch.zeros((), dtype=torch.long))  # training calls so far (landmark draws)

    @property
    def redraw_policy(self) -> str:
        """How landmarks are drawn, recorded with results."""
        return "every training call; the seed's draw in evaluation" if self.cfg.redraw else "never (the seed's draw)"

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        mask = padding_mask(key_padding_mask, k)
        real = torch.ones(q.shape[0], q.shape[2], dtype=torch.bool, device=q.device) if mask is None else mask
        draw = 0
        if self.training and self.cfg.redraw:
            draw = int(self.draws) + 1
            self.draws.fill_(draw)
        scale = q.shape[-1] ** -0.25  # kappa(q, k) = exp(-|q - k|^2 / (2 sqrt(p))) of the unscaled rows
        q, k = q * scale, k * scale
        landmarks, valid = landmark_rows(q, k, real, self.cfg.num_landmarks, self.cfg.seed, draw)
        cfg = self.cfg
        return nystrom_kernel_attention(q, k, v, real, landmarks, valid, cfg.regularisation, cfg.inverse_iterations)
