"""The one linear-attention kernel every feature-map attention shares, and the feature-map interface.

out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)

(sums over j <= i in the causal form). Masking (padded keys contribute nothing), the normaliser
guard, the random-feature redraw schedule and speed live here, once.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

CAUSAL_CHUNK = 64  # causal form: exact quadratic inside chunks of this many positions, prefix sums across


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


def _guard(denominator: Tensor, eps: float) -> Tensor:
    """Keep the normaliser's sign and at least eps away from zero (trig features can make it negative)."""
    return torch.where(denominator >= 0, denominator.clamp_min(eps), denominator.clamp_max(-eps))


def linear_attention(phi_q: Tensor, phi_k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None,
                     eps: float = 1e-6, causal: bool = False) -> Tensor:
    """Normalised linear attention from features.

    phi_q, phi_k: (B, H, N, M); v: (B, H, N, D); key_padding_mask: (B, N) bool, True = real token.
    Returns (B, H, N, D). Padded keys are zeroed before the sums; `causal` restricts query i to keys j <= i.
    """
    if key_padding_mask is not None:
        phi_k = phi_k * key_padding_mask[:, None, :, None].to(phi_k.dtype)
    ones = torch.ones(*v.shape[:-1], 1, dtype=v.dtype, device=v.device)
    values = torch.cat([v, ones], dim=-1)  # the last column accumulates the normaliser
    if causal:
        out = _causal_products(phi_q, phi_k, values)
    else:
        out = phi_q @ (phi_k.transpose(-2, -1) @ values)  # (B, H, N, D + 1), never N x N
    return out[..., :-1] / _guard(out[..., -1:], eps)


def _causal_products(phi_q: Tensor, phi_k: Tensor, values: Tensor, chunk: int = CAUSAL_CHUNK) -> Tensor:
    """sum_{j <= i} (phi_q_i . phi_k_j) values_j for every i: (B, H, N, M), (B, H, N, E) -> (B, H, N, E).

    Chunked prefix sums: O(N (chunk + M) E) time, O(N M E / chunk) memory for the running states.
    """
    b, h, n, m = phi_q.shape
    pad = (-n) % chunk
    if pad:
        phi_q, phi_k, values = (nn.functional.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, values))
    c = (n + pad) // chunk
    q_c, k_c = phi_q.view(b, h, c, chunk, m), phi_k.view(b, h, c, chunk, m)
    v_c = values.view(b, h, c, chunk, values.shape[-1])
    states = k_c.transpose(-2, -1) @ v_c  # (B, H, C, M, E): each chunk's sum of phi_k v^T
    earlier = states.cumsum(dim=2) - states  # exclusive prefix: chunks before this one
    within = (q_c @ k_c.transpose(-2, -1)).tril() @ v_c  # exact inside the chunk
    out = q_c @ earlier + within
    return out.reshape(b, h, c * chunk, -1)[:, :, :n]


class LinearKernelAttention(nn.Module):
    """Attention = one feature map + the shared linear kernel.

    redraw_every > 0 calls `feature_map.new_feature_map()` before every redraw_every-th training forward
    (training forwards are counted in the buffer `training_steps`); evaluation never redraws.
    """

    def __init__(self, feature_map: FeatureMap, eps: float = 1e-6, causal: bool = False, redraw_every: int = 0):
        super().__init__()
        self.feature_map = feature_map
        self.eps, self.causal, self.redraw_every = eps, causal, redraw_every
        self.register_buffer("training_steps", torch.zeros((), dtype=torch.long))

    @property
    def redraw_policy(self) -> str:
        """How random features are redrawn, recorded with results."""
        return "never" if self.redraw_every <= 0 else f"every {self.redraw_every} training steps"

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if self.training:
            if self.redraw_every > 0 and self.training_steps > 0 and self.training_steps % self.redraw_every == 0:
                self.feature_map.new_feature_map()
            self.training_steps += 1
        phi_q = self.feature_map.forward_queries(q)
        phi_k = self.feature_map.forward_keys(k, key_padding_mask)
        return linear_attention(phi_q, phi_k, v, key_padding_mask, self.eps, self.causal)
