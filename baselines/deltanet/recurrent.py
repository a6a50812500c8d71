"""The delta rule one token at a time, for decoding: S = a S, then S = S + beta k (v - S^T k)^T, o = S^T q."""

from __future__ import annotations

import torch
from torch import Tensor


def delta_rule_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, beta_t: Tensor, log_gate_t: Tensor | None = None, *, state: Tensor
) -> tuple[Tensor, Tensor]:
    """q_t, k_t (B, H, Dk), v_t (B, H, Dv), beta_t and log_gate_t (B, H) (no gate: a = 1), state (B, H, Dk, Dv)
    -> o_t (B, H, Dv), new state."""
    if log_gate_t is not None:
        state = state * log_gate_t.exp()[..., None, None]
    error = v_t - torch.einsum("bhk,bhkv->bhv", k_t, state)
    state = state + k_t[..., None] * (beta_t[..., None] * error)[..., None, :]
    return torch.einsum("bhk,bhkv->bhv", q_t, state), state
