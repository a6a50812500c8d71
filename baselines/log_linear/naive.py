"""Log-linear attention from its definition (Guo et al. 2025, arXiv 2506.04761, eq. 4-6 over Mamba-2's decay): the
reference the chunked form and the step are tested against.

o_t = sum_{s <= t} lambda_t^(l(t, s)) exp(G_t - G_s) (q_t . k_s) v_s, G the cumulative log decay, l(t, s) the level
of key s in the Fenwick-tree partition of the prefix of query t: l(t, t) = 0, and for s < t the buckets of
2^(l - 1) keys that t's binary digits cut the prefix into, l(t, s) = bit_length(t XOR s) (fla's
construct_level_mask, fla/ops/log_linear_attn/naive.py). Positions count real tokens only (a padded token is a
removed one, as fla's layers unpad). q, k: (B, H, N, Dk); v: (B, H, N, Dv); g: (B, H, N) (0 at padding);
lambda: (B, H, N, L) per level; real: (B, N) bool.
"""

from __future__ import annotations

import torch
from torch import Tensor


def bit_length(x: Tensor, bits: int) -> Tensor:
    """The bit length of non-negative integers x < 2^bits (0 for 0)."""
    powers = 2 ** torch.arange(bits, device=x.device)
    return (x[..., None] >= powers).sum(dim=-1)


def positions(real: Tensor) -> Tensor:
    """Each token's position among its row's real tokens (B, N), int64 (a padded token repeats the last one's)."""
    return real.long().cumsum(dim=1) - 1


def _weights(q: Tensor, k: Tensor, log_gate: Tensor, scales: Tensor, level: Tensor, keys: Tensor) -> Tensor:
    """lambda_t^(level) exp(-|G_t - G_s|) (q_t . k_s) over the allowed (t, s) `keys` (B, N, N), else 0."""
    b, h, n, _ = q.shape
    total = log_gate.cumsum(dim=2)
    gap = -(total[..., :, None] - total[..., None, :]).abs()
    decay = gap.masked_fill(~keys[:, None], -torch.inf).exp()
    lam = scales.gather(3, level[:, None].expand(b, h, n, n))
    return lam * decay * (q @ k.transpose(-2, -1))


def naive_log_linear(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scales: Tensor, real: Tensor
) -> tuple[Tensor, None]:
    """Causal, O(N^2): the outputs (B, H, N, Dv) (no single state to return: the Fenwick states are many)."""
    n = q.shape[2]
    p = positions(real)
    level = bit_length(p[:, :, None] ^ p[:, None, :], scales.shape[-1])
    earlier = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    return _weights(q, k, log_gate, scales, level, earlier & real[:, None, :]) @ v, None


def naive_log_linear_encoder(q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, scales: Tensor, real: Tensor) -> Tensor:
    """The encoder form, ours, from its definition: keys s <= t as the causal form, keys s > t by the same rule on
    the reversed sequence (levels from the positions counted from the end, the gates of t + 1 .. s)."""
    n = q.shape[2]
    p = positions(real)
    back = real.sum(dim=1, keepdim=True) - 1 - p
    later = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    level = torch.where(later, back[:, :, None] ^ back[:, None, :], p[:, :, None] ^ p[:, None, :])
    level = bit_length(level, scales.shape[-1])
    return _weights(q, k, log_gate, scales, level, real[:, None, :].expand(-1, n, -1)) @ v
