"""Retention (RetNet, Sun et al. 2023): linear attention with a fixed decay per head.

S_t = gamma_h S_{t-1} + k_t v_t^T, o_t = S_t^T q_t / sqrt(D), gamma_h = 1 - 2^(-5-h) for head h = 0 .. H-1
(the paper's schedule; one head's gamma_0 = 31/32 for every head when num_heads is 1), then the per-head norm
(`output_norm`, RetNet's GroupNorm). It is GLA's recurrence with one scalar gate per head, so its three
renderings are GLA's (`attnbench.baselines.gla`: naive, chunk, recurrent). Padded positions neither write
nor count as distance. Encoder (causal=False) form: the symmetric decay gamma^|i-j| of the paper's parallel
form D_ij without its causal mask, i.e. each key weighted by gamma to its distance from the query.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from attnbench.baselines.gla.chunk import gated_form
from attnbench.baselines.gla.naive import naive_gated_recurrence, naive_symmetric_decay
from attnbench.baselines.gla.recurrent import gated_recurrence_step
from attnbench.kernels import fla_route
from attnbench.kernels.recurrent_attention import RecurrentAttention, RecurrentConfig, State, real_rows
from attnbench.registry import register_attention

CHUNK = 64  # |log gamma| <= 1/32 per step: exponents inside a chunk stay below 2


def retention_decays(num_heads: int) -> Tensor:
    """gamma_h = 1 - 2^(-5-h), h = 0 .. num_heads - 1 (RetNet's schedule), float64 (num_heads,)."""
    return 1 - 2.0 ** (-5 - torch.arange(num_heads, dtype=torch.float64))


@dataclasses.dataclass
class RetentionConfig(RecurrentConfig):
    pass


@register_attention(
    "retention", config=RetentionConfig, causal=True, normalised=False, recurrent_state=True, positive_features=False
)
class RetentionAttention(RecurrentAttention):
    """RetNet's multi-scale retention: a fixed exponential decay per head, no normaliser in the recurrence."""

    def __init__(self, cfg: RetentionConfig):
        super().__init__(cfg)
        self.register_buffer("log_decay", retention_decays(cfg.num_heads).log().view(1, -1, 1, 1))

    def _inputs(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        b, _, n, _ = q.shape
        log_gate = self.log_decay.to(q.dtype).expand(b, q.shape[1], n, 1)
        return q / math.sqrt(q.shape[-1]), real_rows(k, mask), real_rows(log_gate, mask)

    def parallel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        q, k, g = self._inputs(q, k, mask)
        return gated_form(q, k, v, g, CHUNK, self.causal, fla_route.headwise_recurrence if self.takes_fla(q) else None)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        q, k, g = self._inputs(q, k, mask)
        return naive_gated_recurrence(q, k, v, g)[0] if self.causal else naive_symmetric_decay(q, k, v, g)

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        d = self.cfg.head_dim
        return {"kv": torch.zeros(batch_size, heads, d, d, dtype=dtype, device=device)}

    def core_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        log_gate = self.log_decay[:, :, 0].to(q_t.dtype)  # (1, heads, 1)
        out, kv = gated_recurrence_step(q_t / math.sqrt(q_t.shape[-1]), k_t, v_t, log_gate, state["kv"])
        return out, {"kv": kv}
