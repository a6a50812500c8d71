"""Sliding-window attention: exact softmax over the last `window` positions (Beltagy et al. 2020's local attention,
the window layers of BASED and of today's hybrids).

Causal: query i sees keys i - w < j <= i, its own included; encoder (causal=False): keys less than w positions
away on either side, |i - j| < w, a symmetric window of 2 w - 1 positions. The window counts positions, padded
ones included (as fla's window and BASED's); a padded key is never read, and a query that sees no real key
returns 0. With w at least the sequence length it is softmax attention. It is FoX without forgetting, in a
window (fla's `naive_forgetting_attn` with g = 0 and `window_size`).

Renderings (this folder): `naive` (FoX's dense definition with no gates and a window), the banded form for
training (the engine's `attnbench.kernels.window`: O(N w d); where the window holds the whole sequence, torch's
fused softmax attention, the same sums without the band), `recurrent` (decoding with a ring buffer of the
last w keys and values, so the state stops growing once the window is full).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from attnbench.baselines.fox.naive import naive_forgetting_attention
from attnbench.baselines.fox.parallel import fused_attention
from attnbench.baselines.sliding_window.recurrent import init_ring, ring_prefill, ring_step
from attnbench.kernels.recurrent_attention import PrefillsState, RecurrentAttention, State, real_rows
from attnbench.kernels.short_conv import ShortConvConfig, unfiltered
from attnbench.kernels.window import banded_softmax
from attnbench.options import option
from attnbench.registry import register_attention


@dataclasses.dataclass
class SlidingWindowConfig(ShortConvConfig):
    window: int = option(
        64,
        "w: each query sees the last w positions, its own included (encoder: the positions less than w away on "
        "either side)",
        minimum=1,
    )


@register_attention(
    "sliding-window", config=SlidingWindowConfig, causal=True, recurrent_state=True, normalised=unfiltered
)
class SlidingWindowAttention(PrefillsState, RecurrentAttention):
    """Exact softmax attention over a sliding window of positions; decoding state of w keys and values."""

    padding_takes_positions = True  # the window counts positions, padded ones included

    def parallel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        if self.cfg.window >= q.shape[2]:  # the window holds the whole sequence: softmax, through the fused kernel
            real = None if mask is None else mask[:, None, None, :]
            return fused_attention(q / math.sqrt(q.shape[-1]), k, v, real, self.causal)
        real = torch.ones(q.shape[0], q.shape[2], dtype=torch.bool, device=q.device) if mask is None else mask
        values = real_rows(torch.cat([v, torch.ones_like(v[..., :1])], dim=-1), mask)
        sums, _ = banded_softmax(q, k, values, real, self.cfg.window, self.causal)
        return sums[..., :-1] / torch.where(sums[..., -1:] > 0, sums[..., -1:], 1.0)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return naive_forgetting_attention(q, k, v, None, self.causal, mask, window=self.cfg.window)

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        return init_ring(batch_size, heads, self.cfg.window, self.cfg.head_dim, dtype, device)

    def core_step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State, real_t: Tensor | None = None
    ) -> tuple[Tensor, State]:
        return ring_step(q_t, k_t, v_t, state, real_t)

    def core_prefill(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor) -> State:
        return ring_prefill(k, v, real, self.cfg.window)

    def state_size(self, context_length: int, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of one sequence's ring buffer, whatever the context length: w slots of H x D keys and as many
        values and one bool (a real token there), and the position (int64) the next token is written at; with
        `short_conv`, its window too."""
        h, d, w = self.cfg.num_heads, self.cfg.head_dim, self.cfg.window
        size = torch.empty((), dtype=dtype).element_size()
        conv = 0 if self.short_conv is None else self.short_conv.state_bytes(h, d, dtype)
        return w * (2 * h * d * size + 1) + 8 + conv
