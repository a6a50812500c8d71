"""Rotary position embedding (RoPE; Su et al. 2021, "RoFormer"): queries and keys rotated by their position.

Each head's D features form D / 2 planes, feature j paired with feature j + D / 2 (GPT-NeoX's and LLaMA's
half split). At position p the pair j is rotated by the angle p * theta_j, theta_j = base^(-2 j / D):

    out_j         = x_j cos(p theta_j) - x_{j+D/2} sin(p theta_j)
    out_{j + D/2} = x_j sin(p theta_j) + x_{j+D/2} cos(p theta_j)

A rotation keeps norms, and the dot product of a query rotated at m with a key rotated at n depends on m - n
only, so softmax attention sees relative positions and no table of positions caps the length. The model rotates
queries and keys before any attention (attnbench.model), as fla's layers rotate them before their kernels: a
feature-map attention then maps rotated inputs, and relative invariance holds exactly only where the attention
reads q.k (softmax). Plain functions, apart from the module that applies them.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rotary_frequencies(dim: int, base: float = 10000.0) -> Tensor:
    """theta_j = base^(-2 j / dim) for j = 0 .. dim/2 - 1 (float64, (dim / 2,))."""
    if dim % 2:
        raise ValueError(f"rotary positions pair features, so the head dimension must be even, not {dim}")
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def rotary_angles(positions: Tensor, dim: int, base: float = 10000.0) -> tuple[Tensor, Tensor]:
    """cos and sin of p * theta_j for each position (N,) -> two (N, dim) float64 tensors, each half repeated."""
    angles = positions.to(torch.float64)[:, None] * rotary_frequencies(dim, base)[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (..., N, D) rotated by the angles of its N positions (cos, sin (N, D)); float64 angles cast to x's dtype."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + turned * sin.to(x.dtype)
