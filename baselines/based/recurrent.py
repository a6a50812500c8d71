"""BASED's attention one token at a time, for decoding: the last w keys exactly, the earlier ones in a Taylor state.

State: `keys` (B, H, <= w, d) and `values` (B, H, <= w, D), the window; `kv` (B, H, M, D + 1), the sum of
phi(k_j) [v_j, 1] over the keys that left it. Each step appends the token, moves the oldest key out of the
window into `kv` once there are more than w, and combines both as `naive_based` does.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnbench.baselines.based.feature_map import TaylorFeatureMap
from attnbench.kernels.window import MIN_SHIFT


def init_based_state(
    batch_size: int, heads: int, dim: int, value_dim: int, window: int, dtype: torch.dtype, device: torch.device
) -> dict[str, Tensor]:
    """The empty state: no window keys, a zero Taylor sum."""
    zeros = {"dtype": dtype, "device": device}
    return {
        "keys": torch.zeros(batch_size, heads, 0, dim, **zeros),
        "values": torch.zeros(batch_size, heads, 0, value_dim, **zeros),
        "kv": torch.zeros(batch_size, heads, 1 + dim + dim**2, value_dim + 1, **zeros),
        "real": torch.zeros(batch_size, 1, 0, **zeros),  # 1 for a real token in the window, 0 for padding
    }


def based_step(
    q_t: Tensor,
    k_t: Tensor,
    v_t: Tensor,
    state: dict[str, Tensor],
    window: int,
    feature_map: TaylorFeatureMap,
    real_t: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """q_t, k_t (B, H, d), v_t (B, H, D) -> o_t (B, H, D) and the new state; `real_t` (B,) False = a padded token,
    which takes its place in the window (as in the parallel form, the window counts positions) but is never read."""
    real = torch.ones(k_t.shape[0], dtype=k_t.dtype, device=k_t.device) if real_t is None else real_t.to(k_t.dtype)
    keys = torch.cat([state["keys"], k_t[:, :, None]], dim=2)
    values = torch.cat([state["values"], v_t[:, :, None]], dim=2)
    reals = torch.cat([state["real"].to(k_t.dtype), real.view(-1, 1, 1)], dim=2)
    kv = state["kv"]
    if keys.shape[2] > window:  # the oldest key leaves the window for the Taylor state
        old_v = torch.cat([values[:, :, 0], torch.ones_like(values[:, :, 0, :1])], dim=-1)
        kv = kv + feature_map(keys[:, :, 0])[..., None] * old_v[..., None, :] * reals[:, :, 0, None, None]
        keys, values, reals = keys[:, :, 1:], values[:, :, 1:], reals[:, :, 1:]
    scores = torch.einsum("bhd,bhjd->bhj", q_t, keys) / math.sqrt(q_t.shape[-1])
    scores = scores.masked_fill(reals == 0, -math.inf)
    shift = scores.amax(dim=-1, keepdim=True).clamp_min(MIN_SHIFT)
    near = torch.einsum(
        "bhj,bhjd->bhd", (scores - shift).exp(), torch.cat([values, torch.ones_like(values[..., :1])], dim=-1)
    )
    total = near + (-shift).exp() * torch.einsum("bhm,bhmd->bhd", feature_map(q_t), kv)
    return total[..., :-1] / torch.where(total[..., -1:] > 0, total[..., -1:], 1.0), {
        "keys": keys,
        "values": values,
        "kv": kv,
        "real": reals,
    }
