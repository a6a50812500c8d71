"""The generalized delta rule one token at a time, for decoding: S = diag(exp(g)) S + beta (alpha^T S) + k v^T."""

from __future__ import annotations

import torch
from torch import Tensor


def dplr_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, alpha_t: Tensor, beta_t: Tensor, log_gate_t: Tensor, *, state: Tensor
) -> tuple[Tensor, Tensor]:
    """q_t, k_t, alpha_t, beta_t, log_gate_t (B, H, Dk), v_t (B, H, Dv), state (B, H, Dk, Dv) -> o_t (B, H, Dv), the
    new state."""
    read = torch.einsum("bhk,bhkv->bhv", alpha_t, state)
    state = (
        state * log_gate_t.exp()[..., None]
        + beta_t[..., None] * read[..., None, :]
        + k_t[..., None] * v_t[..., None, :]
    )
    return torch.einsum("bhk,bhkv->bhv", q_t, state), state
