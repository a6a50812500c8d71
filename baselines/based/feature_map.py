"""BASED's second-order Taylor feature map (Arora et al. 2024): phi(x) . phi(y) = 1 + s + s^2 / 2, s = x . y / sqrt(d)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnbench.kernels.linear.contract import FeatureMap


class TaylorFeatureMap(FeatureMap):
    """phi(x) = [1, x / d^(1/4), vec(x x^T) / (sqrt(2) sqrt(d))]: (B, H, N, d) -> (B, H, N, 1 + d + d^2), the
    second-order Taylor expansion of exp(x . y / sqrt(d)); positive as a kernel (1 + s + s^2/2 >= 1/2)."""

    def __init__(self, input_dim: int):
        super().__init__()
        self.input_dim = input_dim
        self.num_features = 1 + input_dim + input_dim**2

    def forward(self, x: Tensor) -> Tensor:
        d = x.shape[-1]
        outer = (x[..., :, None] * x[..., None, :]).flatten(-2) / math.sqrt(2 * d)
        return torch.cat([torch.ones_like(x[..., :1]), x / d**0.25, outer], dim=-1)

    def cost(self, n: int, d: int) -> dict[str, float]:
        """FLOPs per (batch, head) of the features of n queries and n keys; no parameters of its own."""
        return {"flops": 2 * n * (2.0 * self.input_dim**2 + self.input_dim), "bytes": 0.0}
