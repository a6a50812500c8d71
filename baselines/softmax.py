"""Exact softmax attention through torch's scaled_dot_product_attention, backend selectable and recorded."""
from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnbench.baselines.masks import key_padding_mask as padding_mask
from attnbench.options import option
from attnbench.registry import AttentionConfig, register_attention

BACKENDS = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
BACKEND_NAMES = {backend: name for name, backend in BACKENDS.items()}


@dataclasses.dataclass
class SoftmaxConfig(AttentionConfig):
    backend: Literal["auto", "math", "flash", "efficient", "cudnn"] = option(
        "auto", "scaled_dot_product_attention backend; auto lets torch choose (the choice is recorded)")


def _auto_backend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> str:
    """The backend torch picks for these inputs (torch's own dispatcher), or 'auto' if it cannot say."""
    try:
        choice = SDPBackend(torch._fused_sdp_choice(q, k, v, mask, 0.0, causal))
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return "auto"
    return BACKEND_NAMES.get(choice, choice.name.lower())


@register_attention("softmax", config=SoftmaxConfig, causal=True)
class SoftmaxAttention(nn.Module):
    """Exact softmax(QK^T / sqrt(d)) V, O(n^2) time and (math backend) memory."""

    def __init__(self, cfg: SoftmaxConfig):
        super().__init__()
        self.cfg = cfg
        self.last_backend: str | None = None  # the backend that ran last, recorded with results

    @property
    def backend(self) -> str:
        """The backend requested."""
        return self.cfg.backend

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        key_padding_mask = padding_mask(key_padding_mask, k)
        mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
        causal = self.cfg.causal
        if causal and mask is not None:  # SDPA takes a mask or is_causal, not both: combine them
            n = q.shape[-2]
            mask = mask & torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
            causal = False
        if self.cfg.backend == "auto":
            self.last_backend = _auto_backend(q, k, v, mask, causal)
            return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        self.last_backend = self.cfg.backend
        with sdpa_kernel(BACKENDS[self.cfg.backend]):
            return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
