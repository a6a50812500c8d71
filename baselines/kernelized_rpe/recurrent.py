"""Causal kernelized attention with RPE one token at a time, for decoding, in a state of fixed size.

Relative positions are clipped at K = max_distance, so every key K or more positions back weighs the same
c(K): those keys sum into one state `far` = sum_j phi(k_j) [v_j, 1]^T (M, D + 1), and the last K keys, each with
its own c(d), stay in a ring buffer: `features` (B, H, K, M) and `values` (B, H, K, D + 1) ([v, 1], zero for a
padded token), token t in slot t mod K; `position` (B,) int64 counts the tokens seen. A step moves the key that
reaches distance K from its slot into `far`, writes the new token there and reads both.
"""

from __future__ import annotations

import torch
from torch import Tensor


def init_window(
    batch_size: int, heads: int, window: int, features: int, dim: int, dtype: torch.dtype, device: torch.device
) -> dict[str, Tensor]:
    """The empty state: K empty slots, a zero far sum, position 0."""
    like = {"dtype": dtype, "device": device}
    return {
        "features": torch.zeros(batch_size, heads, window, features, **like),
        "values": torch.zeros(batch_size, heads, window, dim + 1, **like),
        "far": torch.zeros(batch_size, heads, features, dim + 1, **like),
        "position": torch.zeros(batch_size, dtype=torch.long, device=device),
    }


def rpe_step(
    phi_q: Tensor,
    phi_k: Tensor,
    v_t: Tensor,
    state: dict[str, Tensor],
    near: Tensor,
    far: Tensor,
    real_t: Tensor | None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """phi_q, phi_k (B, H, M), v_t (B, H, D) -> o_t (B, H, D) and the state after it (the given one unchanged);
    near (H, K): c(d) for d = 0 .. K - 1, far (H, 1): c(K); `real_t` (B,) False = a padded token (it takes its
    slot, weightless)."""
    window = state["features"].shape[2]
    batch = torch.arange(phi_q.shape[0], device=phi_q.device)
    position = state["position"].to(phi_q.device)
    slot = position % window
    values_t = torch.cat([v_t, torch.ones_like(v_t[..., :1])], dim=-1)
    if real_t is not None:
        values_t = values_t * real_t.to(values_t.dtype)[:, None, None]
    leaving = (position >= window).to(phi_q.dtype)[:, None, None, None]  # the slot holds the key K positions back
    old_features, old_values = (
        state["features"][batch, :, slot],
        state["values"][batch, :, slot],
    )  # (B, H, M), (B, H, E)
    far_sum = state["far"].to(phi_q) + leaving * old_features[..., :, None] * old_values[..., None, :]
    features, values = state["features"].to(phi_q).clone(), state["values"].to(phi_q).clone()
    features[batch, :, slot], values[batch, :, slot] = phi_k, values_t
    distance = (position[:, None] - torch.arange(window, device=phi_q.device)) % window  # (B, K): t - token in slot
    weights = near[None].expand(phi_q.shape[0], -1, -1).gather(2, distance[:, None].expand(-1, near.shape[0], -1))
    scores = (features @ phi_q[..., None])[..., 0] * weights  # (B, H, K)
    out = (scores[:, :, None] @ values)[:, :, 0] + far[None] * (phi_q[:, :, None] @ far_sum)[:, :, 0]
    total = out[..., -1:]
    new = {"features": features, "values": values, "far": far_sum, "position": state["position"] + 1}
    return out[..., :-1] / torch.where(total > 0, total, 1.0), new


def rpe_prefill(phi_k: Tensor, v: Tensor, real: Tensor, window: int) -> dict[str, Tensor]:
    """The state `rpe_step` leaves after key features phi_k (B, H, N, M), values v (B, H, N, D), real (B, N)."""
    b, h, n, m = phi_k.shape
    values = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1) * real[:, None, :, None].to(v.dtype)
    state = init_window(b, h, window, m, v.shape[-1], v.dtype, v.device)
    split = max(0, n - window)
    last = torch.arange(split, n, device=v.device)
    state["features"][:, :, last % window] = phi_k[:, :, last]
    state["values"][:, :, last % window] = values[:, :, last]
    state["far"] = phi_k[:, :, :split].transpose(-2, -1) @ values[:, :, :split]
    state["position"].fill_(n)
    return state
