"""BASED's attention from its definition, one query at a time: the reference for the chunked form and the step.

For query i and key j, s_ij = q_i . k_j / sqrt(d) (q, k already projected to d features). Keys in the
window (causal: i - w < j <= i; encoder: |i - j| < w) weigh exp(s_ij), the others the Taylor kernel
1 + s_ij + s_ij^2 / 2; out_i = sum_j weight_ij v_j / sum_j weight_ij over real keys. Every weight is scaled by
exp(-m_i), m_i the largest window score (at least MIN_SHIFT), which leaves the ratio as it is.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnbench.kernels.window import MIN_SHIFT


def naive_based(q: Tensor, k: Tensor, v: Tensor, window: int, causal: bool, mask: Tensor | None = None) -> Tensor:
    """q, k (B, H, N, d), v (B, H, N, D), mask (B, N) True = real -> (B, H, N, D)."""
    b, _, n, d = q.shape
    real = torch.ones(b, n, dtype=torch.bool, device=q.device) if mask is None else mask
    positions = torch.arange(n, device=q.device)
    outs = []
    for i in range(n):
        s = torch.einsum("bhd,bhjd->bhj", q[:, :, i], k) / math.sqrt(d)
        distance = i - positions
        near = (distance >= 0) & (distance < window) if causal else distance.abs() < window
        seen = real[:, None, :] & ((positions <= i) if causal else True)
        s = s.masked_fill(~seen, 0.0)
        shift = s.masked_fill(~(near & seen), -math.inf).amax(dim=-1, keepdim=True).clamp_min(MIN_SHIFT)
        weights = torch.where(near, (s - shift).exp(), (-shift).exp() * (1 + s + s * s / 2)) * seen
        total = weights.sum(dim=-1, keepdim=True)
        outs.append(torch.einsum("bhj,bhjd->bhd", weights, v) / torch.where(total > 0, total, 1.0))
    return torch.stack(outs, dim=2)
