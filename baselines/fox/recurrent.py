"""FoX one token at a time, for decoding: a KV cache that also keeps each key's forgetting since it was written.

State: `keys` (B, H, T, D), `values` (B, H, T, Dv), `real` (B, T) bool (False = a padded token, kept but never
read) and `decay` (B, H, T), F_tj = sum_{j < l <= t} log f_l for every cached key j. A step adds the new gate
to every key's decay, appends the token with decay 0 and attends over the cache; the state grows by one
position per token, as softmax's KV cache does.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def init_cache(
    batch_size: int, heads: int, dim: int, value_dim: int, dtype: torch.dtype, device: torch.device
) -> dict[str, Tensor]:
    """The empty cache."""
    like = {"dtype": dtype, "device": device}
    return {
        "keys": torch.zeros(batch_size, heads, 0, dim, **like),
        "values": torch.zeros(batch_size, heads, 0, value_dim, **like),
        "decay": torch.zeros(batch_size, heads, 0, **like),
        "real": torch.zeros(batch_size, 0, dtype=torch.bool, device=device),
    }


def cache_attention(q_t: Tensor, keys: Tensor, values: Tensor, bias: Tensor | float, real: Tensor) -> Tensor:
    """One query q_t (B, H, D) over cached keys (B, H, T, D) and values, additive bias (B, H, T) or 0, real (B, T) ->
    (B, H, Dv); 0 where no real key is cached."""
    scores = (keys @ q_t[..., None])[..., 0] / math.sqrt(q_t.shape[-1]) + bias
    weights = torch.softmax(scores.masked_fill(~real[:, None], -math.inf), dim=-1).nan_to_num(0.0)
    return (weights[:, :, None] @ values)[:, :, 0]


def forgetting_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, log_gate_t: Tensor, state: dict[str, Tensor], real_t: Tensor | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """q_t, k_t (B, H, D), v_t (B, H, Dv), log_gate_t (B, H) -> o_t (B, H, Dv) and the cache after it; `real_t` (B,)
    False = a padded token: cached but never read, its gate taken as 0 (no forgetting)."""
    real_t = torch.ones(q_t.shape[0], dtype=torch.bool, device=q_t.device) if real_t is None else real_t
    log_gate_t = log_gate_t * real_t[:, None].to(log_gate_t.dtype)
    keys = torch.cat([state["keys"].to(k_t), k_t[:, :, None]], dim=2)
    values = torch.cat([state["values"].to(v_t), v_t[:, :, None]], dim=2)
    decay = torch.cat(
        [state["decay"].to(log_gate_t) + log_gate_t[..., None], torch.zeros_like(log_gate_t[..., None])], 2
    )
    real = torch.cat([state["real"].to(real_t.device), real_t[:, None]], dim=1)
    out = cache_attention(q_t, keys, values, decay, real)
    return out, {"keys": keys, "values": values, "decay": decay, "real": real}
