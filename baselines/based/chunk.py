"""BASED's attention for training: the exact window in bands, the Taylor kernel outside it by prefix sums.

Queries go in blocks of P = w positions; block b's window keys all lie in blocks b - 1 .. b + 1, so the exact
part is a (P, 3P) score block per query block: O(N w d). The Taylor part over the keys outside the window
is linear attention with features phi (`TaylorFeatureMap`): keys j <= i - w are a causal prefix sum over
the keys shifted w positions later (the shared kernel's chunked causal products); in the encoder, the
Taylor kernel over every key in factored form less its sum over the window's keys (from the same score
blocks). Both parts share the scale exp(-m_i) of `naive_based`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnbench.baselines.based.feature_map import TaylorFeatureMap
from attnbench.baselines.based.naive import MIN_SHIFT
from attnbench.kernels.linear.parallel import causal_products


def _blocks(x: Tensor, p: int, nb: int) -> Tensor:
    """(B, H, N, E) -> (B, H, nb, 3P, E): for each block of P positions, the rows of blocks b - 1, b, b + 1."""
    x = nn.functional.pad(x, (0, 0, p, (nb + 1) * p - x.shape[2]))  # one zero block before, up to nb + 2 blocks
    x = x.view(*x.shape[:2], nb + 2, p, x.shape[-1])
    return torch.cat([x[:, :, :-2], x[:, :, 1:-1], x[:, :, 2:]], dim=3)


def window_part(
    q: Tensor, k: Tensor, values: Tensor, real: Tensor, window: int, causal: bool
) -> tuple[Tensor, Tensor | None, Tensor]:
    """Over the window keys: sum of exp(s_ij - m_i) [v_j, 1] and (encoder only, else None) sum of the Taylor
    kernel (1 + s + s^2/2) [v_j, 1], each (B, H, N, D + 1), and m_i (B, H, N, 1). q, k (B, H, N, d); values [v, 1] (B, H, N, D + 1)
    with padded rows zeroed; real (B, N) bool."""
    b, h, n, d = q.shape
    p = window
    nb = -(-n // p)
    q_blocks = nn.functional.pad(q, (0, 0, 0, nb * p - n)).view(b, h, nb, p, d)
    scores = q_blocks @ _blocks(k, p, nb).transpose(-2, -1) / math.sqrt(d)  # (B, H, nb, P, 3P)
    offset = torch.arange(p, device=q.device)[:, None] + p - torch.arange(3 * p, device=q.device)  # i - j
    near = (offset >= 0) & (offset < window) if causal else offset.abs() < window
    key_real = _blocks(real[:, None, :, None].to(q.dtype), p, nb)[..., 0] > 0  # (B, 1, nb, 3P)
    allowed = near & key_real[..., None, :]
    value_blocks = _blocks(values, p, nb)
    taylor = None if causal else (1 + scores + scores * scores / 2).masked_fill(~allowed, 0.0) @ value_blocks
    scores = scores.masked_fill(~allowed, -math.inf)  # before exp: a loud padded key must not make inf * 0
    shift = scores.amax(dim=-1, keepdim=True).clamp_min(MIN_SHIFT)
    out = (scores - shift).exp() @ value_blocks

    def rows(x: Tensor | None) -> Tensor | None:
        return None if x is None else x.reshape(b, h, nb * p, -1)[:, :, :n]

    return rows(out), rows(taylor), rows(shift)


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
