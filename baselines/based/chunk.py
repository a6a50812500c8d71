"""BASED's attention for training: the exact window in bands, the Taylor kernel outside it by prefix sums.

The exact part is the engine's banded softmax (`attnbench.kernels.window`: a (P, 3P) score block per query
block of P = w positions, O(N w d)). The Taylor part over the keys outside the window
is linear attention with features phi (`TaylorFeatureMap`): keys j <= i - w are a causal prefix sum over
the keys shifted w positions later (the shared kernel's chunked causal products); in the encoder, the
Taylor kernel over every key in factored form less its sum over the window's keys (from the same score
blocks). Both parts share the scale exp(-m_i) of `naive_based`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnbench.baselines.based.feature_map import TaylorFeatureMap
from attnbench.kernels.linear.parallel import causal_products
from attnbench.kernels.window import banded_exp_sums, banded_rows, banded_scores, window_blocks


def window_part(
    q: Tensor, k: Tensor, values: Tensor, real: Tensor, window: int, causal: bool
) -> tuple[Tensor, Tensor | None, Tensor]:
    """Over the window keys: sum of exp(s_ij - m_i) [v_j, 1] and (encoder only, else None) sum of the Taylor
    kernel (1 + s + s^2/2) [v_j, 1], each (B, H, N, D + 1), and m_i (B, H, N, 1). q, k (B, H, N, d); values [v, 1]
    (B, H, N, D + 1) with padded rows zeroed; real (B, N) bool. The window's blocks are the engine's
    (`attnbench.kernels.window`)."""
    n = q.shape[2]
    scores, allowed, p = banded_scores(q, k, real, window, causal)
    value_blocks = window_blocks(values, p, scores.shape[2])
    taylor = None if causal else (1 + scores + scores * scores / 2).masked_fill(~allowed, 0.0) @ value_blocks
    out, shift = banded_exp_sums(scores, allowed, value_blocks)
    return banded_rows(out, n), None if taylor is None else banded_rows(taylor, n), banded_rows(shift, n)


def _later(x: Tensor, by: int) -> Tensor:
    """x (B, H, N, E) moved `by` positions later along the sequence, zeros in front."""
    return nn.functional.pad(x, (0, 0, by, 0))[:, :, : x.shape[2]]


def taylor_part(
    phi_q: Tensor, phi_k: Tensor, values: Tensor, window: int, causal: bool, near_taylor: Tensor | None
) -> Tensor:
    """sum over keys outside the window of phi(q_i) . phi(k_j) [v_j, 1] -> (B, H, N, D + 1); phi_k and values
    with padded rows zeroed; near_taylor the same sum over the window keys (`window_part`).

    Causal: a prefix sum over the keys shifted w positions later. Encoder: every key's sum in factored form,
    phi_q (phi_k^T [v, 1]), less the window's: one O(N M E) product in place of two shifted prefix sums (forward
    and on the reversed sequence) that each also pay O(N chunk M) inside their chunks.
    """
    if causal:
        return causal_products(phi_q, _later(phi_k, window), _later(values, window))
    state = (values.transpose(-2, -1) @ phi_k).transpose(-2, -1)  # (B, H, M, E); see `factored_linear_attention`
    return phi_q @ state - near_taylor


def chunk_based(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    causal: bool,
    mask: Tensor | None = None,
    feature_map: TaylorFeatureMap | None = None,
) -> Tensor:
    """The same outputs as `naive_based`: q, k (B, H, N, d), v (B, H, N, D), mask (B, N) -> (B, H, N, D)."""
    b, _, n, d = q.shape
    real = torch.ones(b, n, dtype=torch.bool, device=q.device) if mask is None else mask
    keep = real[:, None, :, None].to(v.dtype)
    values = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1) * keep
    near, near_taylor, shift = window_part(q, k, values, real, window, causal)
    feature_map = feature_map or TaylorFeatureMap(d)
    far = taylor_part(feature_map(q), feature_map(k) * keep, values, window, causal, near_taylor)
    total = near + (-shift).exp() * far
    return total[..., :-1] / torch.where(total[..., -1:] > 0, total[..., -1:], 1.0)
