"""The gated linear recurrence, token by token: the reference the chunked form and the step are tested against.

S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,  o_t = S_t^T q_t   (GLA, Yang et al. 2024, eq. 1-2; RetNet's
retention is the case of one scalar g per head). q, k, g: (B, H, N, Dk), g = log of the gate <= 0 (any shape
that broadcasts: (1, H, 1, 1) for retention); v: (B, H, N, Dv).
"""

from __future__ import annotations

import torch
from torch import Tensor


def naive_gated_recurrence(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, initial: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The causal recurrence by a loop over positions -> outputs (B, H, N, Dv) and the last state (B, H, Dk, Dv)."""
    b, h, n, dk = q.shape
    log_gate = log_gate.expand(b, h, n, dk)
    state = q.new_zeros(b, h, dk, v.shape[-1]) if initial is None else initial
    outs = []
    for t in range(n):
        state = state * log_gate[:, :, t, :, None].exp() + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], state))
    return torch.stack(outs, dim=2), state


def naive_symmetric_decay(q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor) -> Tensor:
    """The encoder (non-causal) form from its definition, O(N^2 Dk): every key j weighted by the gates between
    it and the query i, exp(-|G_i - G_j|) per key channel, G = cumsum(g) (gamma^|i-j| for retention)."""
    b, h, n, dk = q.shape
    total = log_gate.expand(b, h, n, dk).cumsum(dim=2)
    decay = (-(total[:, :, :, None] - total[:, :, None, :]).abs()).exp()  # (B, H, N_i, N_j, Dk)
    weights = torch.einsum("bhik,bhjk,bhijk->bhij", q, k, decay)
    return weights @ v
