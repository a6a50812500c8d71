"""Forgetting attention from its definition, dense: the reference for FoX's parallel form and step, and for the
sliding window (no gates, a window).

o_i = sum_j w_ij v_j / sum_j w_ij over the real keys j that query i may see, w_ij = exp(q_i . k_j / sqrt(D) + F_ij),
F_ij = sum of the log forget gates log f_l strictly after the earlier of i, j up to the later one (causal:
F_ij = sum_{j < l <= i} log f_l, FoX's D_ij; encoder: the same sum on either side, F_ij = -|c_i - c_j| for the
cumulative log gates c). With a window w, query i sees only keys less than w positions away (causal:
i - w < j <= i). A query that sees no real key returns 0.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def naive_forgetting_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_gate: Tensor | None,
    causal: bool,
    mask: Tensor | None = None,
    window: int | None = None,
) -> Tensor:
    """q, k (B, H, N, Dk), v (B, H, N, Dv), log_gate (B, H, N) (None: no forgetting), mask (B, N) True = real ->
    (B, H, N, Dv); the (N, N) scores in full."""
    n = q.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if log_gate is not None:
        cumulative = log_gate.cumsum(dim=-1)
        between = cumulative[..., :, None] - cumulative[..., None, :]  # c_i - c_j
        scores = scores + (between if causal else -between.abs())
    distance = torch.arange(n, device=q.device)[:, None] - torch.arange(n, device=q.device)
    seen = distance >= 0 if causal else torch.ones(n, n, dtype=torch.bool, device=q.device)
    if window is not None:
        seen = seen & (distance.abs() < window)
    if mask is not None:
        seen = seen & mask[:, None, None, :]
    weights = torch.softmax(scores.masked_fill(~seen, -math.inf), dim=-1).nan_to_num(0.0)
    return weights @ v
