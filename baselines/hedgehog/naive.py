"""Feature-map attention from its definition, one query at a time: the reference for the shared kernel and the step.

out_i = sum_j (phi(q_i) . phi(k_j)) v_j / max(sum_j phi(q_i) . phi(k_j), eps), over real keys j (j <= i if causal).
"""

from __future__ import annotations

import torch
from torch import Tensor


def naive_feature_attention(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, causal: bool, mask: Tensor | None = None, eps: float = 1e-12
) -> Tensor:
    """phi_q, phi_k (B, H, N, M), v (B, H, N, D), mask (B, N) True = real -> (B, H, N, D)."""
    b, _, n, _ = phi_q.shape
    real = torch.ones(b, n, dtype=torch.bool, device=v.device) if mask is None else mask
    outs = []
    for i in range(n):
        weights = torch.einsum("bhm,bhjm->bhj", phi_q[:, :, i], phi_k) * real[:, None, :]
        if causal:
            weights = weights * (torch.arange(n, device=v.device) <= i)
        outs.append(torch.einsum("bhj,bhjd->bhd", weights, v) / weights.sum(dim=-1, keepdim=True).clamp_min(eps))
    return torch.stack(outs, dim=2)
