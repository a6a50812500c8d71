"""Feature-map attention one token at a time, for decoding: kv += phi(k_t) [v_t, 1]^T, out = phi(q_t)^T kv, normalised."""

from __future__ import annotations

import torch
from torch import Tensor


def feature_attention_step(
    phi_q: Tensor, phi_k: Tensor, v_t: Tensor, kv: Tensor, eps: float = 1e-12
) -> tuple[Tensor, Tensor]:
    """phi_q, phi_k (B, H, M), v_t (B, H, D), kv (B, H, M, D + 1) -> o_t (B, H, D), the new kv."""
    values = torch.cat([v_t, torch.ones_like(v_t[..., :1])], dim=-1)
    kv = kv + phi_k[..., None] * values[..., None, :]
    total = torch.einsum("bhm,bhmd->bhd", phi_q, kv)
    return total[..., :-1] / total[..., -1:].clamp_min(eps), kv
