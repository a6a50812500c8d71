"""Kernelized attention with relative positional encoding, dense: the reference for the FFT form and the step.

out_i = sum_j c(i - j) phi(q_i) . phi(k_j) v_j / sum_j c(i - j) phi(q_i) . phi(k_j) over real keys, c(d) the weight of
a key d positions before the query (`offset_weights`): the (N, N) matrix C_ij = c(i - j) is Toeplitz.
"""

from __future__ import annotations

import torch
from torch import Tensor


def offset_weights(bias: Tensor, max_distance: int, causal: bool, n: int) -> Tensor:
    """c(d) = exp(b_r) for d = i - j = -(n - 1) .. n - 1, r = j - i clipped to [-K, K] (K = max_distance; a causal
    attention's b covers r = -K .. 0 and c(d) = 0 for d < 0): bias (H, 2K + 1) or (H, K + 1) -> (H, 2n - 1),
    entry d + n - 1."""
    d = torch.arange(-(n - 1), n, device=bias.device)
    index = (-d).clamp(-max_distance, max_distance) + max_distance  # b's column for r = j - i
    weights = bias.exp()[:, index.clamp_max(bias.shape[1] - 1)]
    return weights * (d >= 0).to(weights.dtype) if causal else weights


def toeplitz_matrix(weights: Tensor) -> Tensor:
    """C_ij = c(i - j) (H, N, N) from `offset_weights` (H, 2N - 1)."""
    n = (weights.shape[-1] + 1) // 2
    i = torch.arange(n, device=weights.device)
    return weights[:, i[:, None] - i[None, :] + n - 1]


def naive_rpe_attention(phi_q: Tensor, phi_k: Tensor, v: Tensor, weights: Tensor, mask: Tensor | None) -> Tensor:
    """phi_q, phi_k (B, H, N, M), v (B, H, N, D), weights (H, 2N - 1) from `offset_weights`, mask (B, N) True = real
    -> (B, H, N, D); the (N, N) attention matrix in full."""
    scores = (phi_q @ phi_k.transpose(-2, -1)) * toeplitz_matrix(weights)
    if mask is not None:
        scores = scores * mask[:, None, None, :].to(scores.dtype)
    total = scores.sum(dim=-1, keepdim=True)
    return (scores @ v) / torch.where(total > 0, total, 1.0)
