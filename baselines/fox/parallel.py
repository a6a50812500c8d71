"""FoX's training form through torch's fused attention (`scaled_dot_product_attention`).

Causal: the bias F_ij = c_i - c_j (c the cumulative log forget gates) splits into a query part and a key part, so
it rides in two extra dimensions of q and k: [q / sqrt(D), c_i, 1] . [k, 1, -c_j] = q . k / sqrt(D) + c_i - c_j.
The causal kernel then runs without an (N, N) bias (flash on CPU and GPU, where torch picks it; v is padded to
the same head size, which flash needs: without it torch fell back to the quadratic-memory math kernel, 8x slower
at 8k tokens), and the gates' gradients flow through those dimensions. As in fla's reference, the bias is a
difference of two cumulative sums, whose float32 rounding grows with their size (a few 1e-4 at 4k tokens of
strong gates). Encoder (F_ij = -|c_i - c_j|, not separable): the bias as a dense (N, N) additive mask. Padded
keys are masked out; a query that sees no real key returns 0.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
    """softmax(q k^T + mask) v with scale 1, causal by `is_causal` or folded into a bool `mask` (B, 1, N, N); a query
    that sees no key returns 0."""
    if causal and mask is not None:  # SDPA takes a mask or is_causal, not both: combine them
        n = q.shape[2]
        mask = mask & torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        causal = False
    out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=1.0)
    return out if mask is None or mask.dtype != torch.bool else out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


def forgetting_attention(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, causal: bool, mask: Tensor | None = None
) -> Tensor:
    """The same outputs as `naive_forgetting_attention` (no window): q, k (B, H, N, D), v (B, H, N, Dv), log_gate
    (B, H, N) with padded positions 0, mask (B, N) True = real -> (B, H, N, Dv)."""
    cumulative = log_gate.cumsum(dim=-1)[..., None]  # (B, H, N, 1)
    real = None if mask is None else mask[:, None, None, :]
    if causal:
        ones = torch.ones_like(cumulative)
        q_plus = torch.cat([q / math.sqrt(q.shape[-1]), cumulative, ones], dim=-1)
        k_plus = torch.cat([k, ones, -cumulative], dim=-1)
        v_plus = nn.functional.pad(v, (0, q_plus.shape[-1] - v.shape[-1]))  # the fused kernels want one head size
        return fused_attention(q_plus, k_plus, v_plus, real, causal=True)[..., : v.shape[-1]]
    bias = -(cumulative - cumulative.transpose(-2, -1)).abs()
    if real is not None:
        bias = bias.masked_fill(~real, -math.inf)
    out = fused_attention(q / math.sqrt(q.shape[-1]), k, v, bias, causal=False)
    return out if real is None else out.masked_fill(~real.any(dim=-1, keepdim=True), 0.0)
