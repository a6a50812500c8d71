"""The generalized delta rule with a diagonal-plus-low-rank transition, token by token: the reference the chunked
form and the step are tested against.

S_t = diag(exp(g_t)) S_{t-1} + beta_t (alpha_t^T S_{t-1}) + k_t v_t^T,  o_t = S_t^T q_t   (S (Dk, Dv) maps keys to
values; the transition diag(w_t) + beta_t alpha_t^T, w_t = exp(g_t) per key channel; RWKV-7 takes alpha = -kk,
beta = kk * a: Peng et al. 2025, eq. 11 in this orientation). q, k, alpha, beta, g: (B, H, N, Dk); v: (B, H, N, Dv).
"""

from __future__ import annotations

import torch
from torch import Tensor


def naive_dplr(
    q: Tensor, k: Tensor, v: Tensor, alpha: Tensor, beta: Tensor, log_gate: Tensor, initial: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The causal recurrence by a loop over positions -> outputs (B, H, N, Dv) and the last state (B, H, Dk, Dv)."""
    b, h, n, dk = k.shape
    state = k.new_zeros(b, h, dk, v.shape[-1]) if initial is None else initial
    outs = []
    for t in range(n):
        read = torch.einsum("bhk,bhkv->bhv", alpha[:, :, t], state)
        state = (
            state * log_gate[:, :, t, :, None].exp()
            + beta[:, :, t, :, None] * read[..., None, :]
            + k[:, :, t, :, None] * v[:, :, t, None, :]
        )
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], state))
    return torch.stack(outs, dim=2), state
