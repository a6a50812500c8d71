"""The one linear-attention kernel every feature-map attention shares, and the feature-map interface.

out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)

Masking (padded keys contribute nothing), the normaliser guard and speed live here, once.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn


class FeatureMap(nn.Module):
    """A map phi: (B, H, N, D) -> (B, H, N, M) applied to queries and keys (fast-transformers style).

    Subclasses implement `forward_queries` and `forward_keys`; random ones also `new_feature_map`
    (redraw their random matrices) and keep evaluation deterministic.
    """

    num_features: int

    def new_feature_map(self) -> None:
        """Redraw random parameters (no-op for deterministic maps)."""

    def forward_queries(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def forward_keys(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """Key features; `key_padding_mask` (B, N), True = real, lets a map exclude padding from statistics."""
        return self.forward_queries(x)


def linear_attention(phi_q: Tensor, phi_k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None,
                     eps: float = 1e-6) -> Tensor:
    """Normalised linear attention from features.

    phi_q, phi_k: (B, H, N, M); v: (B, H, N, D); key_padding_mask: (B, N) bool, True = real token.
    Returns (B, H, N, D). Padded keys are zeroed before the sums; the normaliser keeps its sign and
    is kept at least eps away from zero (trig features can make it negative).
    """
    if key_padding_mask is not None:
        phi_k = phi_k * key_padding_mask[:, None, :, None].to(phi_k.dtype)
    ones = torch.ones(*v.shape[:-1], 1, dtype=v.dtype, device=v.device)
    kv = phi_k.transpose(-2, -1) @ torch.cat([v, ones], dim=-1)  # (B, H, M, D + 1)
    out = phi_q @ kv  # (B, H, N, D + 1)
    numerator, denominator = out[..., :-1], out[..., -1:]
    denominator = torch.where(denominator >= 0, denominator.clamp_min(eps), denominator.clamp_max(-eps))
    return numerator / denominator


class LinearKernelAttention(nn.Module):
    """Attention = one feature map + the shared linear kernel."""

    def __init__(self, feature_map: FeatureMap, eps: float = 1e-6):
        super().__init__()
        self.feature_map = feature_map
        self.eps = eps

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        phi_q = self.feature_map.forward_queries(q)
        phi_k = self.feature_map.forward_keys(k, key_padding_mask)
        return linear_attention(phi_q, phi_k, v, key_padding_mask, self.eps)
