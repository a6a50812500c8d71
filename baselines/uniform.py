"""Uniform attention: every query's output is the mean of the values over the real tokens (no kernel at all).

The floor of every kernel comparison: a task on which softmax does not beat it detectably does not exercise
attention, and no feature map can show a gain there. Causal: the mean over the real tokens up to the query.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

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

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, _, n, _ = v.shape
        real = (torch.ones(b, n, dtype=torch.bool, device=v.device) if key_padding_mask is None else key_padding_mask)[
            :, None, :, None
        ]  # (B, 1, N, 1)
        values, counts = v.masked_fill(~real, 0.0), real.to(v.dtype)
        if self.cfg.causal:
            return values.cumsum(dim=2) / counts.cumsum(dim=2).clamp_min(1.0)
        return (values.sum(dim=2, keepdim=True) / counts.sum(dim=2, keepdim=True).clamp_min(1.0)).expand_as(v)
