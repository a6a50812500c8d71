"""Exact softmax attention through torch's scaled_dot_product_attention, backend selectable."""
from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from harness.options import option
from harness.registry import AttentionConfig, register_attention

BACKENDS = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


@dataclasses.dataclass
class SoftmaxConfig(AttentionConfig):
    backend: Literal["auto", "math", "flash", "efficient", "cudnn"] = option(
        "auto", "scaled_dot_product_attention backend; auto lets torch choose")


@register_attention("softmax", config=SoftmaxConfig, causal=True)
class SoftmaxAttention(nn.Module):
    """Exact softmax(QK^T / sqrt(d)) V, O(n^2) time and (math backend) memory."""

    def __init__(self, cfg: SoftmaxConfig):
        super().__init__()
        self.cfg = cfg

    @property
    def backend(self) -> str:
        """The backend requested; recorded with every result."""
        return self.cfg.backend

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
        if self.cfg.backend == "auto":
            return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.cfg.causal and mask is None)
        with sdpa_kernel(BACKENDS[self.cfg.backend]):
            return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.cfg.causal and mask is None)
