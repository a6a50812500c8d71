"""Exact softmax attention through torch's scaled_dot_product_attention, backend selectable and recorded."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnbench.kernels.masks import key_padding_mask as padding_mask
from attnbench.kernels.recurrent_attention import check_step
from attnbench.kernels.short_conv import ShortConvConfig, short_conv_for, unfiltered
from attnbench.options import option
from attnbench.registry import register_attention

BACKENDS = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
BACKEND_NAMES = {backend: name for name, backend in BACKENDS.items()}


@dataclasses.dataclass
class SoftmaxConfig(ShortConvConfig):
    backend: Literal["auto", "math", "flash", "efficient", "cudnn"] = option(
        "auto", "scaled_dot_product_attention backend; auto lets torch choose (the choice is recorded)"
    )


def _auto_backend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> str:
    """The backend torch picks for these inputs (torch's own dispatcher), or 'auto' if it cannot say."""
    try:
        choice = SDPBackend(torch._fused_sdp_choice(q, k, v, mask, 0.0, causal))
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return "auto"
    return BACKEND_NAMES.get(choice, choice.name.lower())


@register_attention("softmax", config=SoftmaxConfig, causal=True, normalised=unfiltered)
class SoftmaxAttention(nn.Module):
    """Exact softmax(QK^T / sqrt(d)) V, O(n^2) time and (math backend) memory; with `short_conv`, on q, k, v
    filtered first (as Zoology's recall models put a short convolution before every mixer)."""

    def __init__(self, cfg: SoftmaxConfig):
        super().__init__()
        self.cfg = cfg
        self.short_conv = short_conv_for(cfg)
        self.last_backend: str | None = None  # the backend that ran last, recorded with results
        self.register_buffer("anchor", torch.zeros(()), persistent=False)  # dtype and device of new states

    @property
    def backend(self) -> str:
        """The backend requested."""
        return self.cfg.backend

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        key_padding_mask = padding_mask(key_padding_mask, k)
        if self.short_conv is not None:
            q, k, v = self.short_conv(q, k, v, key_padding_mask)
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

    def init_state(self, batch_size: int) -> dict[str, Tensor]:
        """The KV cache before any token: keys, values (B, H, 0, D) and real (B, 0) bool (False = a padded
        token), in the module's dtype and device (its buffer `anchor`, which `.to` converts)."""
        heads, dim = self.cfg.num_heads, self.cfg.head_dim
        empty = self.anchor.new_zeros(batch_size, heads, 0, dim)
        state = {
            "keys": empty,
            "values": empty.clone(),
            "real": torch.zeros(batch_size, 0, dtype=torch.bool, device=empty.device),
        }
        if self.short_conv is not None:
            state["conv"] = self.short_conv.init_state(batch_size, heads, dim, empty.dtype, empty.device)
        return state

    def step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: dict[str, Tensor], key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """One token against the KV cache: q_t, k_t, v_t (B, H, D) -> out_t (B, H, D) and the cache grown by one
        position (the given one is left unchanged); `key_padding_mask` (B,) False = a padded token, kept in the
        cache but never attended to. Equals `forward` with causal=True at that position (0 before any real key)."""
        if not self.cfg.causal:
            raise ValueError("step is the recurrent form of causal attention; build the attention with causal=True")
        check_step(self, q_t, k_t, v_t, state)
        real_t = (
            torch.ones(q_t.shape[0], 1, dtype=torch.bool, device=q_t.device)
            if key_padding_mask is None
            else key_padding_mask[:, None].to(q_t.device)
        )
        conv = {}
        if self.short_conv is not None:
            (q_t, k_t, v_t), conv["conv"] = self.short_conv.step(q_t, k_t, v_t, state["conv"], real_t[:, 0])
        cache = state["keys"]
        grow = cache.shape[2] > 0  # an empty cache takes the heads, dtype and device of the first token
        keys = torch.cat([cache.to(k_t), k_t[:, :, None]], dim=2) if grow else k_t[:, :, None]
        values = torch.cat([state["values"].to(v_t), v_t[:, :, None]], dim=2) if grow else v_t[:, :, None]
        real = torch.cat([state["real"].to(real_t.device), real_t], dim=1)
        scores = (keys @ q_t[..., None])[..., 0] / math.sqrt(q_t.shape[-1])  # (B, H, T)
        weights = torch.softmax(scores.masked_fill(~real[:, None], -math.inf), dim=-1).nan_to_num(0.0)
        out = (weights[:, :, None] @ values)[:, :, 0]
        return out, {"keys": keys, "values": values, "real": real, **conv}

    def state_size(self, context_length: int, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of one sequence's KV cache after `context_length` tokens: per position H x D keys and as many
        values, plus one bool (real or padded); with `short_conv`, its window too."""
        h, d = self.cfg.num_heads, self.cfg.head_dim
        window = 0 if self.short_conv is None else self.short_conv.state_bytes(h, d, dtype)
        return context_length * (2 * h * d * torch.empty((), dtype=dtype).element_size() + 1) + window

    def prefill_state(
        self, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, q: Tensor | None = None
    ) -> dict[str, Tensor]:
        """The cache after keys k (B, H, N, D) and values v, as `step` would leave it after N tokens; with
        `short_conv`, the queries q too (the filter's window holds the last inputs of all three)."""
        real = (
            torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device)
            if key_padding_mask is None
            else key_padding_mask.to(k.device)
        )
        if self.short_conv is None:
            return {"keys": k, "values": v, "real": real}
        if q is None:
            raise ValueError("softmax with short_conv needs the queries q to prefill its filter window")
        window = self.short_conv.window(q, k, v, real)
        _, k, v = self.short_conv(q, k, v, real)
        return {"keys": k, "values": v, "real": real, "conv": window}
