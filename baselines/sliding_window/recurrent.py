"""Sliding-window attention one token at a time, for decoding: a ring buffer of the last w keys and values.

State: `keys` (B, H, w, D), `values` (B, H, w, Dv), `real` (B, w) bool (False = an empty slot or a padded token)
and `position` (B,) int64, the number of tokens seen: token t goes to slot t mod w, over the token w positions
before it. Softmax over a set of keys does not depend on their order, so the slots are read as they lie. The
state has the same size from the first token on.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.baselines.fox.recurrent import cache_attention


def init_ring(
    batch_size: int, heads: int, window: int, dim: int, dtype: torch.dtype, device: torch.device
) -> dict[str, Tensor]:
    """The empty ring: w zero slots, none real, the next token at position 0."""
    like = {"dtype": dtype, "device": device}
    return {
        "keys": torch.zeros(batch_size, heads, window, dim, **like),
        "values": torch.zeros(batch_size, heads, window, dim, **like),
        "real": torch.zeros(batch_size, window, dtype=torch.bool, device=device),
        "position": torch.zeros(batch_size, dtype=torch.long, device=device),
    }


def ring_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, state: dict[str, Tensor], real_t: Tensor | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """q_t, k_t (B, H, D), v_t (B, H, Dv) -> o_t (B, H, Dv) and the ring after it (the given one unchanged);
    `real_t` (B,) False = a padded token, which takes its slot but is never read."""
    batch = torch.arange(q_t.shape[0], device=q_t.device)
    slot = state["position"].to(q_t.device) % state["keys"].shape[2]
    real_t = torch.ones(q_t.shape[0], dtype=torch.bool, device=q_t.device) if real_t is None else real_t
    keys, values, real = state["keys"].to(k_t).clone(), state["values"].to(v_t).clone(), state["real"].clone()
    keys[batch, :, slot] = k_t
    values[batch, :, slot] = v_t
    real[batch, slot] = real_t.to(real.device)
    out = cache_attention(q_t, keys, values, 0.0, real)
    return out, {"keys": keys, "values": values, "real": real, "position": state["position"] + 1}


def ring_prefill(k: Tensor, v: Tensor, real: Tensor, window: int) -> dict[str, Tensor]:
    """The ring `ring_step` leaves after keys k (B, H, N, D), values v and real (B, N), in one pass."""
    b, h, n, d = k.shape
    ring = init_ring(b, h, window, d, k.dtype, k.device)
    last = torch.arange(max(0, n - window), n, device=k.device)
    slots = last % window
    ring["keys"][:, :, slots] = k[:, :, last]
    ring["values"][:, :, slots] = v[:, :, last]
    ring["real"][:, slots] = real[:, last]
    ring["position"].fill_(n)
    return ring
