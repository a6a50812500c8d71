"""The parallel renderings, from whole-sequence features: non-causal in factored form (the PyTorch training path)
and causal by chunked prefix sums over materialised features."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnbench.kernels.linear.contract import FeatureChunk

CAUSAL_CHUNK = 64  # causal form: exact quadratic inside chunks of this many positions, prefix sums across


def guard_denominator(denominator: Tensor, eps: float) -> Tensor:
    """Keep the normaliser's sign and at least eps away from zero (trig features can make it negative)."""
    return torch.where(denominator >= 0, denominator.clamp_min(eps), denominator.clamp_max(-eps))


def padding_weights(v: Tensor, key_padding_mask: Tensor | None) -> Tensor | None:
    """(B, 1, N, 1) 1 for real keys, 0 for padding, in v's dtype; None without a mask."""
    return None if key_padding_mask is None else key_padding_mask[:, None, :, None].to(v.dtype)


def _values_and_ones(v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
    """[v, 1] (B, H, N, D + 1), whose last column accumulates the normaliser, with padded keys' rows zeroed."""
    weights = padding_weights(v, key_padding_mask)
    values = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    return values if weights is None else values * weights


def linear_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    eps: float = 1e-6,
    causal: bool = False,
    chunk: int = CAUSAL_CHUNK,
) -> Tensor:
    """Normalised linear attention from features.

    phi_q, phi_k: (B, H, N, M); v: (B, H, N, D); key_padding_mask: (B, N) bool, True = real token.
    Returns (B, H, N, D). Padded keys are removed through their values and weight (one pass over v,
    not over phi_k); `causal` restricts query i to keys j <= i, exactly inside blocks of `chunk` positions
    and by prefix sums across them (chunk >= N: the quadratic parallel form).
    """
    if not causal:
        return factored_linear_attention(FeatureChunk(phi_q), FeatureChunk(phi_k), v, key_padding_mask, eps)
    out = causal_products(phi_q, phi_k, _values_and_ones(v, key_padding_mask), chunk)
    return out[..., :-1] / guard_denominator(out[..., -1:], eps)


def factored_linear_attention(
    q_chunk: FeatureChunk, k_chunk: FeatureChunk, v: Tensor, key_padding_mask: Tensor | None = None, eps: float = 1e-6
) -> Tensor:
    """Non-causal `linear_attention` from whole-sequence features in factored form; differentiable.

    Row weights, scales and offsets act on the small (M, D + 1) state and on (N, D + 1) products, never on
    the (N, M) feature values: phi_k^T [v, 1] = s_k (values_k^T (w [v, 1]) + o_k sum_j w_j [v_j, 1]), w the
    key row weights times the padding mask, and phi_q S = s_q (w_q (values_q S) + o_q 1^T S). Saves the
    passes (and the saved activations) that materialising phi = s (values w + o) would cost in training.
    """
    real = _values_and_ones(v, key_padding_mask)
    weighted = real if k_chunk.row_weights is None else real * k_chunk.row_weights
    # (B, H, M, D + 1), as the transpose of weighted^T values: the (N, M) values stay the untransposed operand,
    # so their gradient comes back contiguous (a transposed one made exp's backward several times slower);
    # the same in `causal_products`
    state = (weighted.transpose(-2, -1) @ k_chunk.values).transpose(-2, -1)
    if k_chunk.offset != 0.0:
        state = state + k_chunk.offset * real.sum(dim=-2, keepdim=True)
    state = state * k_chunk.scale
    out = q_chunk.values @ state  # (B, H, N, D + 1), never N x N
    if q_chunk.row_weights is not None:
        out = out * q_chunk.row_weights
    if q_chunk.offset != 0.0:
        out = out + q_chunk.offset * state.sum(dim=-2, keepdim=True)
    out = out * q_chunk.scale
    return out[..., :-1] / guard_denominator(out[..., -1:], eps)


def causal_products(phi_q: Tensor, phi_k: Tensor, values: Tensor, chunk: int = CAUSAL_CHUNK) -> Tensor:
    """sum_{j <= i} (phi_q_i . phi_k_j) values_j for every i: (B, H, N, M), (B, H, N, E) -> (B, H, N, E).

    Chunked prefix sums: O(N (chunk + M) E) time, O(N M E / chunk) memory for the running states.
    """
    b, h, n, m = phi_q.shape
    pad = (-n) % chunk
    if pad:
        phi_q, phi_k, values = (nn.functional.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, values))
    c = (n + pad) // chunk
    q_c, k_c = phi_q.view(b, h, c, chunk, m), phi_k.view(b, h, c, chunk, m)
    v_c = values.view(b, h, c, chunk, values.shape[-1])
    states = (v_c.transpose(-2, -1) @ k_c).transpose(-2, -1)  # (B, H, C, M, E): each chunk's sum of phi_k v^T
    earlier = states.cumsum(dim=2) - states  # exclusive prefix: chunks before this one
    within = (q_c @ k_c.transpose(-2, -1)).tril() @ v_c  # exact inside the chunk
    out = q_c @ earlier + within
    return out.reshape(b, h, c * chunk, -1)[:, :, :n]
