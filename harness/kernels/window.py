"""Exact softmax over a band of positions in O(N w d): the window of BASED and of sliding-window attention.

Queries go in blocks of P = min(w, N) positions; the keys within w of any query of block b all lie in blocks
b - 1 .. b + 1, so every query block meets one (P, 3P) block of scores. Causal: keys i - w < j <= i; encoder:
keys less than w away on either side, |i - j| < w. The window counts positions, padded ones included; a padded
key is never read. Sums are scaled by exp(-m_i), m_i the largest score in the query's window (at least
MIN_SHIFT), which leaves any ratio of them as it is and keeps exp finite.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

MIN_SHIFT = -60.0  # exp(-m) stays finite in float32 when no window score is large


def window_blocks(x: Tensor, p: int, nb: int) -> Tensor:
    """(B, H, N, E) -> (B, H, nb, 3P, E): for each block of P positions, the rows of blocks b - 1, b, b + 1."""
    x = nn.functional.pad(x, (0, 0, p, (nb + 1) * p - x.shape[2]))  # one zero block before, up to nb + 2 blocks
    x = x.view(*x.shape[:2], nb + 2, p, x.shape[-1])
    return torch.cat([x[:, :, :-2], x[:, :, 1:-1], x[:, :, 2:]], dim=3)


def banded_scores(q: Tensor, k: Tensor, real: Tensor, window: int, causal: bool) -> tuple[Tensor, Tensor, int]:
    """Scores q_i . k_j / sqrt(d) of each query block against its three key blocks (B, H, nb, P, 3P), which of them
    lie in the window at a real key (B, 1 or H, nb, P, 3P) bool, and P. q, k (B, H, N, d); real (B, N) bool."""
    b, h, n, d = q.shape
    p = max(1, min(window, n))
    nb = -(-n // p)
    q_blocks = nn.functional.pad(q, (0, 0, 0, nb * p - n)).view(b, h, nb, p, d)
    scores = q_blocks @ window_blocks(k, p, nb).transpose(-2, -1) / math.sqrt(d)
    offset = torch.arange(p, device=q.device)[:, None] + p - torch.arange(3 * p, device=q.device)  # i - j
    near = (offset >= 0) & (offset < window) if causal else offset.abs() < window
    key_real = window_blocks(real[:, None, :, None].to(q.dtype), p, nb)[..., 0] > 0  # (B, 1, nb, 3P)
    return scores, near & key_real[..., None, :], p


def banded_exp_sums(scores: Tensor, allowed: Tensor, value_blocks: Tensor) -> tuple[Tensor, Tensor]:
    """sum_j exp(s_ij - m_i) values_j over the allowed keys (B, H, nb, P, E), and m_i (B, H, nb, P, 1)."""
    scores = scores.masked_fill(~allowed, -math.inf)  # before exp: a loud padded key must not make inf * 0
    shift = scores.amax(dim=-1, keepdim=True).clamp_min(MIN_SHIFT)
    return (scores - shift).exp() @ value_blocks, shift


def banded_rows(x: Tensor, n: int) -> Tensor:
    """(B, H, nb, P, E) -> the first n rows (B, H, n, E)."""
    b, h = x.shape[:2]
    return x.reshape(b, h, -1, x.shape[-1])[:, :, :n]


def banded_softmax(
    q: Tensor, k: Tensor, values: Tensor, real: Tensor, window: int, causal: bool
) -> tuple[Tensor, Tensor]:
    """Over each query's window: sum_j exp(s_ij - m_i) values_j (B, H, N, E) and m_i (B, H, N, 1); values (B, H, N,
    E), e.g. [v, 1] for the normaliser in the last column; real (B, N) bool."""
    scores, allowed, p = banded_scores(q, k, real, window, causal)
    sums, shift = banded_exp_sums(scores, allowed, window_blocks(values, p, scores.shape[2]))
    n = q.shape[2]
    return banded_rows(sums, n), banded_rows(shift, n)
