"""The gated linear recurrence one token at a time, for decoding: S = diag(exp(g_t)) S + k_t v_t^T, o = S^T q_t."""

from __future__ import annotations

import torch
from torch import Tensor


def gated_recurrence_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, log_gate_t: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """q_t, k_t, log_gate_t (B, H, Dk) (the gate may broadcast), v_t (B, H, Dv), state (B, H, Dk, Dv)
    -> o_t (B, H, Dv), the new state."""
    state = state * log_gate_t.exp()[..., None] + k_t[..., None] * v_t[..., None, :]
    return torch.einsum("bhk,bhkv->bhv", q_t, state), state
