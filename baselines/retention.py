"""Retention (RetNet, Sun et al. 2023): linear attention with a fixed decay per head.

S_t = gamma_h S_{t-1} + k_t v_t^T, o_t = S_t^T q_t / sqrt(D), gamma_h = 1 - 2^(-5-h) for head h = 0 .. H-1
(the paper's schedule; one head's gamma_0 = 31/32 for every head when num_heads is 1), then the per-head norm
(`output_norm`, RetNet's GroupNorm). It is GLA's recurrence with one scalar gate per head, so its three
renderings are GLA's (`attnbench.baselines.gla`: naive, chunk, recurrent). Padded positions neither write
nor count as distance. Encoder (causal=False) form: the symmetric decay gamma^|i-j| of the paper's parallel
form D_ij without its causal mask, i.e. each key weighted by gamma to its distance from the query.

Beside RetNet's layer (and fla's, fla/layers/multiscale_retention.py): the xPos rotation of q and k and the swish
output gate (GroupNorm(o) * swish(x W_G)) are left out, so this is the retention recurrence with its norm; fla's
naive_retention (fla/ops/retention/naive.py) computes this recurrence (tests/test_fla_reference.py).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from attnbench.baselines.gla import gated_linear
from attnbench.kernels import fla_route
from attnbench.kernels.gated_recurrence import GatedRecurrence
from attnbench.kernels.recurrent_attention import RecurrentConfig, real_rows
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
class RetentionAttention(GatedRecurrence):
    """RetNet's multi-scale retention: a fixed exponential decay per head, no normaliser in the recurrence."""

    renderings = gated_linear(CHUNK, fla=fla_route.headwise_recurrence)

    def __init__(self, cfg: RetentionConfig):
        super().__init__(cfg)
        self.register_buffer("log_decay", retention_decays(cfg.num_heads).log().view(1, -1, 1, 1))

    def gated_inputs(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        b, _, n, _ = q.shape
        log_gate = self.log_decay.to(q.dtype).expand(b, q.shape[1], n, 1)
        return q / math.sqrt(q.shape[-1]), real_rows(k, mask), v, real_rows(log_gate, mask)
