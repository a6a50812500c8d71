"""Log-linear attention one token at a time, for decoding: a Fenwick tree of states (Guo et al. 2025, §3.3).

The state holds, per level j >= 0, the bucket of 2^j earlier tokens that the next position's binary digits cut off
(zeros where its bit is clear), each decayed to now, and the count of tokens so far. A step decays every bucket,
reads them with the query's lambda of their level (j + 1; level 0 is the token itself), then adds the token as a
bucket of one and carries, as a binary counter: the buckets below the lowest clear bit merge into it. The state
grows by a level each time the count passes a power of two: O(log N) (Dk, Dv) states.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnbench.baselines.log_linear.naive import bit_length


def log_linear_step(
    q_t: Tensor,
    k_t: Tensor,
    v_t: Tensor,
    log_gate_t: Tensor,
    scales_t: Tensor,
    levels: Tensor,
    count: Tensor,
    real_t: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """q_t, k_t (B, H, Dk), v_t (B, H, Dv), log_gate_t (B, H), scales_t (B, H, L), levels (B, H, K, Dk, Dv), count
    (B,) tokens so far -> o_t (B, H, Dv), the levels after it (K may grow by one), count + 1. `real_t` (B,): the rows
    whose token is real, the only ones that may grow K (the caller keeps the others' state)."""
    levels = levels * log_gate_t.exp()[..., None, None, None]
    depth = levels.shape[2]
    own = scales_t[..., :1] * (q_t * k_t).sum(dim=-1, keepdim=True) * v_t
    out = own + torch.einsum("bhd,bhjde,bhj->bhe", q_t, levels, scales_t[..., 1 : depth + 1])
    carried = bit_length(count ^ (count + 1), 48) - 1  # (B,): the trailing ones of the count
    grown = int((carried if real_t is None else torch.where(real_t, carried, -1)).max()) + 1
    if grown > depth:
        levels = nn.functional.pad(levels, (0, 0, 0, 0, 0, grown - depth))
    j = torch.arange(levels.shape[2], device=levels.device)
    below = (j < carried[:, None])[:, None, :, None, None].to(levels.dtype)
    at = (j == carried[:, None])[:, None, :, None, None].to(levels.dtype)
    merged = k_t[..., :, None] * v_t[..., None, :] + (levels * below).sum(dim=2)
    return out, levels * (1 - below - at) + at * merged[:, :, None], count + 1
