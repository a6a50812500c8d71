"""FoX, the Forgetting Transformer (Lin, Nikishin, He, Courville, ICLR 2025): softmax attention with a forget gate.

Each head forgets at a data-dependent rate f_t = sigmoid(w . x_t + b) in (0, 1), and the logits take the sum of the
log gates between key and query: o_i = sum_{j <= i} exp(q_i . k_j / sqrt(D) + sum_{j < l <= i} log f_l) v_j,
normalised over j. The attention sees heads, not the token x_t, so the gate reads the head's key k_t, itself a
linear projection of x_t (as `gla` does): f_t = sigmoid(k_t . w + b), w (D) and b per head (one pair shared by every
head when num_heads is 1), initialised as fla's `f_proj` (uniform within 1 / sqrt(D)) from the attention's own
seeded generator. Either way f starts near 1/2 in every head (FoX's own code zeroes the bias, with small weights:
zhixuan-lin/forgetting-transformer), so a key's weight halves with each later token until the gates learn to open: a
slow start where the task needs keys far back (MQAR, issue 46). FoX is a decoder; its encoder (causal=False) form
here is ours: each key weighted by the gates between it and the query on either side, F_ij = sum over l strictly
after the earlier of i, j up to the later one (as `gla` and `retention` do). Padded positions are never read and
forget nothing. FoX-Pro's output gate and key-value shift need the token itself and are left out; `short_conv` is at
hand.

Renderings (this folder, as fla's ops/forgetting_attn): `naive` (the dense definition), `parallel` (torch's fused
attention, the gate bias carried in two extra q, k dimensions), `recurrent` (decoding with a KV cache that grows
with the context: keys, values and each key's forgetting).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from attnbench.baselines.fox.naive import naive_forgetting_attention
from attnbench.baselines.fox.parallel import forgetting_attention
from attnbench.baselines.fox.recurrent import forgetting_step, init_cache
from attnbench.baselines.random_projections import seeded_generator
from attnbench.kernels.recurrent_attention import PrefillsState, RecurrentAttention, State, real_rows
from attnbench.kernels.short_conv import ShortConvConfig, unfiltered
from attnbench.registry import register_attention


@dataclasses.dataclass
class FoxConfig(ShortConvConfig):
    pass


def uniform_parameter(shape: tuple[int, ...], bound: float, *keys: int) -> nn.Parameter:
    """U(-bound, bound) of `shape` from a generator of its own, seeded by `keys` (the attention's seed, a tag)."""
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound, generator=seeded_generator(*keys)))


@register_attention("fox", config=FoxConfig, causal=True, recurrent_state=True, normalised=unfiltered)
class FoxAttention(PrefillsState, RecurrentAttention):
    """Softmax attention whose logits forget: + sum of the log forget gates between key and query."""

    padding_takes_positions = True  # a padded token takes a place in the KV cache (never read)

    def __init__(self, cfg: FoxConfig):
        super().__init__(cfg)
        bound = 1 / math.sqrt(cfg.head_dim)
        self.gate_weight = uniform_parameter((cfg.num_heads, cfg.head_dim, 1), bound, cfg.seed, 1)
        self.gate_bias = uniform_parameter((cfg.num_heads, 1, 1), bound, cfg.seed, 2)

    def log_gate(self, k: Tensor, mask: Tensor | None = None) -> Tensor:
        """log f (B, H, N) from keys (B, H, N, D): logsigmoid(k . w + b); 0 (no forgetting) at padded positions."""
        return real_rows(nn.functional.logsigmoid(k @ self.gate_weight + self.gate_bias)[..., 0], mask)

    def parallel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return forgetting_attention(q, k, v, self.log_gate(k, mask), self.causal, mask)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return naive_forgetting_attention(q, k, v, self.log_gate(k, mask), self.causal, mask)

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        return init_cache(batch_size, heads, self.cfg.head_dim, self.cfg.head_dim, dtype, device)

    def core_step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State, real_t: Tensor | None = None
    ) -> tuple[Tensor, State]:
        log_gate = self.log_gate(k_t[:, :, None])[:, :, 0]
        return forgetting_step(q_t, k_t, v_t, log_gate, state, real_t)

    def core_prefill(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor) -> State:
        cumulative = self.log_gate(k, real).cumsum(dim=-1)
        return {"keys": k, "values": v, "decay": cumulative[..., -1:] - cumulative, "real": real}

    def state_size(self, context_length: int, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of one sequence's cache after `context_length` tokens: per position H x D keys and as many values,
        H decays and one bool (real or padded); with `short_conv`, its window too."""
        h, d = self.cfg.num_heads, self.cfg.head_dim
        size = torch.empty((), dtype=dtype).element_size()
        window = 0 if self.short_conv is None else self.short_conv.state_bytes(h, d, dtype)
        return context_length * ((2 * d + 1) * h * size + 1) + window
