"""Linformer (Wang et al. 2020): softmax attention over keys and values projected along the sequence.

out = softmax(Q (E^T K)^T / sqrt(d)) (F^T V) with learned E, F of shape (max_length, k); a sequence of
n <= max_length tokens uses their first n rows. Padded keys and values are zeroed before the projection.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from attnbench.baselines.random_projections import seeded_generator
from attnbench.kernels.masks import key_padding_mask as padding_mask
from attnbench.options import option, require
from attnbench.registry import AttentionConfig, check_heads, register_attention


@dataclasses.dataclass
class LinformerConfig(AttentionConfig):
    projected_length: int = option(
        256, "k: rows the keys and values are projected to along the sequence", maximum=65536
    )
    share_heads: bool = option(
        True, "one E and one F per layer shared by its heads (headwise sharing); False: per head"
    )

    def __post_init__(self) -> None:
        require(
            self.max_length is not None and self.max_length >= 1,
            f"attention 'linformer' needs max_length (got {self.max_length!r}); pass the task's maximum length",
        )
        require(self.projected_length >= 1, f"projected_length={self.projected_length} must be at least 1")
        require(
            not self.causal,
            "attention 'linformer' has no causal form (causal=True given); "
            "use 'softmax', 'performer' or 'elu-linear' for causal attention",
        )


@register_attention("linformer", config=LinformerConfig, needs_max_length=True)
class LinformerAttention(nn.Module):
    """Low-rank softmax attention: keys and values projected to k rows with learned E, F; O(n k) time."""

    def __init__(self, cfg: LinformerConfig):
        super().__init__()
        self.cfg = cfg
        shape = (1 if cfg.share_heads else cfg.num_heads, cfg.max_length, cfg.projected_length)
        bound = 1 / math.sqrt(cfg.max_length)  # nn.Linear(max_length, k)'s default initialisation, seeded
        generator = seeded_generator(cfg.seed)
        self.e_proj = nn.Parameter(torch.empty(shape).uniform_(-bound, bound, generator=generator))
        self.f_proj = nn.Parameter(torch.empty(shape).uniform_(-bound, bound, generator=generator))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        key_padding_mask = padding_mask(key_padding_mask, k)
        n = k.shape[-2]
        if n > self.cfg.max_length:
            raise ValueError(
                f"sequence length {n} exceeds linformer's max_length={self.cfg.max_length}; "
                f"build it with a larger max_length"
            )
        check_heads("linformer", self.e_proj.shape[0], k.shape[1])
        if key_padding_mask is not None:
            keep = key_padding_mask[:, None, :, None].to(k.dtype)
            k, v = k * keep, v * keep
        k_proj = self.e_proj[:, :n].transpose(-2, -1).to(k.dtype) @ k  # (B, H, k, d)
        v_proj = self.f_proj[:, :n].transpose(-2, -1).to(v.dtype) @ v
        return nn.functional.scaled_dot_product_attention(q, k_proj, v_proj)

    def cost(self, batch: int, heads: int, n: int, d: int) -> dict[str, float]:
        """FLOPs and minimum bytes (float32) of one forward: E^T K and F^T V (2 k n d each), the scores and the
        weighted sum (2 n k d each), the softmax (about 5 operations per score); bytes: q, k, v read, out
        written, and the first n rows of E and F read (once when heads share them)."""
        k = self.cfg.projected_length
        flops = batch * heads * (2 * 2.0 * k * n * d + 2 * 2.0 * n * k * d + 5.0 * n * k)
        projections = 2 * self.e_proj.shape[0] * n * k * 4.0
        return {"flops": flops, "bytes": 4.0 * batch * heads * n * d * 4 + projections}
