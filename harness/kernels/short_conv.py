"""A short depthwise causal convolution on q, k and v, as BASED, GLA and DeltaNet put before their attention.

Each of q, k, v gets its own depthwise filter of `kernel_size` taps per (head, channel) along the sequence,
then SiLU (fla's `ShortConvolution` default): out_t = silu(sum_{s < K} w_s x_{t-K+1+s}), inputs before the
start being 0. Padded positions (key_padding_mask False) are zeroed before the filter, so they reach no output. Built
with num_heads = 1, one head's filters serve every head. The decoding step keeps the last K - 1 inputs.

Any attention takes it through `ShortConvConfig.short_conv` (0 = off) and `short_conv_for(cfg)`.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from attnbench.options import option
from attnbench.registry import AttentionConfig, check_heads

STREAMS = ("q", "k", "v")


@dataclasses.dataclass
class ShortConvConfig(AttentionConfig):
    """The `short_conv` option, for any attention config to inherit."""

    short_conv: int = option(
        0,
        "taps of a depthwise causal convolution (+ SiLU) on q, k and v; 0 = off (BASED, GLA and DeltaNet use 4)",
        minimum=0,
        maximum=64,
    )


class ShortConvolution(nn.Module):
    """Depthwise causal filters on q, k, v (B, H, N, D) -> the same shapes; weights (3, heads, D, K), drawn from
    `generator` (never torch's global one, so that a seed alone fixes them)."""

    def __init__(self, num_heads: int, head_dim: int, kernel_size: int, generator: torch.Generator):
        super().__init__()
        self.num_heads, self.kernel_size = num_heads, kernel_size
        bound = 1.0 / math.sqrt(kernel_size)  # nn.Conv1d's default for a depthwise filter (fan-in K)
        weight = torch.empty(len(STREAMS), num_heads, head_dim, kernel_size)
        self.weight = nn.Parameter(weight.uniform_(-bound, bound, generator=generator))

    def filter(self, x: Tensor, weight: Tensor) -> Tensor:
        """One stream: x (B, H, N, D), weight (heads, D, K) -> silu of the causal filter, (B, H, N, D)."""
        b, h, n, d = x.shape
        check_heads("short_conv", self.num_heads, h)
        taps = weight.expand(h, d, self.kernel_size).reshape(h * d, 1, self.kernel_size)
        padded = nn.functional.pad(x.permute(0, 1, 3, 2).reshape(b, h * d, n), (self.kernel_size - 1, 0))
        out = nn.functional.conv1d(padded, taps, groups=h * d)
        return nn.functional.silu(out.view(b, h, d, n).permute(0, 1, 3, 2))

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v filtered, padded positions zeroed first; key_padding_mask (B, N), True = real."""
        keep = None if key_padding_mask is None else key_padding_mask[:, None, :, None].to(q.dtype)
        return tuple(self.filter(x if keep is None else x * keep, w) for x, w in zip((q, k, v), self.weight))

    def init_state(
        self, batch_size: int, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> Tensor:
        """The last K - 1 inputs of each stream, zeros at the start: (B, 3, H, K - 1, D) (batch first, as every
        tensor of a recurrent state)."""
        return torch.zeros(batch_size, len(STREAMS), heads, self.kernel_size - 1, head_dim, dtype=dtype, device=device)

    def state_bytes(self, heads: int, head_dim: int, dtype: torch.dtype) -> int:
        """Bytes of one sequence's window (`init_state`): the last K - 1 inputs of q, k and v."""
        return len(STREAMS) * heads * (self.kernel_size - 1) * head_dim * torch.empty((), dtype=dtype).element_size()

    def window(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The state `step` holds after q, k, v (B, H, N, D): their last K - 1 inputs (padded ones as 0, zeros
        before the start), (B, 3, H, K - 1, D)."""
        x = torch.stack([q, k, v], dim=1)
        if key_padding_mask is not None:
            x = x * key_padding_mask[:, None, None, :, None].to(x.dtype)
        tail = x[:, :, :, max(0, x.shape[3] - (self.kernel_size - 1)) :]
        return nn.functional.pad(tail, (0, 0, self.kernel_size - 1 - tail.shape[3], 0))

    def step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: Tensor, key_padding_mask: Tensor | None = None
    ) -> tuple[tuple[Tensor, Tensor, Tensor], Tensor]:
        """One position: q_t, k_t, v_t (B, H, D) and the window `state` -> filtered (B, H, D) each, new state;
        `key_padding_mask` (B,) False = a padded token, which enters the window as 0, as in `forward`."""
        x = torch.stack([q_t, k_t, v_t], dim=1)
        if key_padding_mask is not None:
            x = x * key_padding_mask.to(x.device, x.dtype)[:, None, None, None]
        window = torch.cat([state.to(x), x[:, :, :, None]], dim=3)  # (B, 3, H, K, D)
        weight = self.weight.transpose(-2, -1)  # (3, heads, K, D): the last tap meets the newest input
        out = nn.functional.silu((window * weight).sum(dim=3))
        return (out[:, 0], out[:, 1], out[:, 2]), window[:, :, :, 1:]


def unfiltered(cfg: ShortConvConfig) -> bool:
    """Whether q, k, v reach the attention as given (no short_conv): a capability rule, e.g. for `normalised`,
    since a normalised attention then averages the filtered values, not v."""
    return cfg.short_conv == 0


def short_conv_for(cfg: ShortConvConfig, generator: torch.Generator | None = None) -> ShortConvolution | None:
    """The convolution `cfg.short_conv` asks for, or None when it is 0; its filters are the first draws of
    `generator` (an attention that draws more passes its own, and goes on drawing from it), by default a new one
    seeded with `cfg.seed`."""
    if cfg.short_conv == 0:
        return None
    generator = torch.Generator().manual_seed(cfg.seed) if generator is None else generator
    return ShortConvolution(cfg.num_heads, cfg.head_dim, cfg.short_conv, generator)
