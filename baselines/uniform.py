"""Uniform attention: every query's output is the mean of the values over the real tokens (no kernel at all).

The floor of every kernel comparison: a task on which softmax does not beat it detectably does not exercise
attention, and no feature map can show a gain there. Causal: the mean over the real tokens up to the query.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from attnbench.errors import ConfigError
from attnbench.kernels import masks
from attnbench.kernels.recurrent_attention import check_step
from attnbench.registry import AttentionConfig, register_attention


@dataclasses.dataclass
class UniformConfig(AttentionConfig):
    """No options of its own: queries and keys are ignored."""


@register_attention("uniform", config=UniformConfig, causal=True)
class UniformAttention(nn.Module):
    """Mean of v over the real keys (B, H, N, D) -> (B, H, N, D); q and k unread; padded values never read."""

    reads_queries_keys = False  # no gradient reaches q or k (attnbench.attention_properties)

    def __init__(self, cfg: UniformConfig):
        super().__init__()
        self.cfg = cfg
        self.register_buffer("anchor", torch.zeros(()), persistent=False)  # dtype and device of new states

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        key_padding_mask = masks.key_padding_mask(key_padding_mask, v)
        b, _, n, _ = v.shape
        real = (torch.ones(b, n, dtype=torch.bool, device=v.device) if key_padding_mask is None else key_padding_mask)[
            :, None, :, None
        ]  # (B, 1, N, 1)
        values, counts = v.masked_fill(~real, 0.0), real.to(v.dtype)
        if self.cfg.causal:
            return values.cumsum(dim=2) / counts.cumsum(dim=2).clamp_min(1.0)
        return (values.sum(dim=2, keepdim=True) / counts.sum(dim=2, keepdim=True).clamp_min(1.0)).expand_as(v)

    def init_state(self, batch_size: int) -> dict[str, Tensor]:
        """The running sum of the real values (B, H, D) and their count (B, 1, 1), zero before the first token, in
        the module's dtype and device (its buffer `anchor`)."""
        if not self.cfg.causal:
            raise ConfigError(
                "uniform was built with causal=False, so it has no recurrent step; build it with causal=True"
            )
        heads, dim = self.cfg.num_heads, self.cfg.head_dim
        return {"sum": self.anchor.new_zeros(batch_size, heads, dim), "count": self.anchor.new_zeros(batch_size, 1, 1)}

    def step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: dict[str, Tensor], key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """One token: the mean of the real values so far (B, H, D); a padded token (mask False) adds nothing."""
        check_step(self, q_t, k_t, v_t, state)
        real = (
            torch.ones(v_t.shape[0], 1, 1, dtype=v_t.dtype)
            if key_padding_mask is None
            else (key_padding_mask.to(v_t.dtype).view(-1, 1, 1))
        )
        total = state["sum"].to(v_t) + v_t * real
        count = state["count"].to(v_t) + real
        return total / count.clamp_min(1.0), {"sum": total, "count": count}
