"""The delta rule token by token: the reference the chunked (WY) form and the step are tested against.

S_t = a_t S_{t-1} + beta_t k_t (v_t - a_t S_{t-1}^T k_t)^T,  o_t = S_t^T q_t   (Schlag et al. 2021, eq. 20-23 in this
orientation: S (Dk, Dv) maps keys to values), a_t = exp(g_t) the gate of Gated DeltaNet (Yang, Kautz, Hatamizadeh
2024, eq. 10; a_t = 1 without one: DeltaNet). q, k: (B, H, N, Dk); v: (B, H, N, Dv); beta, g: (B, H, N).
"""

from __future__ import annotations

import torch
from torch import Tensor


def naive_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_gate: Tensor | None = None, initial: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The causal recurrence by a loop over positions -> outputs (B, H, N, Dv) and the last state (B, H, Dk, Dv)."""
    b, h, n, dk = k.shape
    state = k.new_zeros(b, h, dk, v.shape[-1]) if initial is None else initial
    outs = []
    for t in range(n):
        if log_gate is not None:
            state = state * log_gate[:, :, t, None, None].exp()
        k_t = k[:, :, t]
        recalled = torch.einsum("bhk,bhkv->bhv", k_t, state)
        state = state + k_t[..., None] * (beta[:, :, t, None] * (v[:, :, t] - recalled))[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], state))
    return torch.stack(outs, dim=2), state
