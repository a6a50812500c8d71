"""GLA, gated linear attention (Yang et al., ICML 2024) with a data-dependent, low-rank gate.

S_t = diag(alpha_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t / sqrt(D), alpha_t = sigmoid(x_t W1 W2 + b)^(1/tau)
(paper: rank 16, tau = 16). The attention sees heads, not the token x_t, so the gate reads the head's key
k_t, itself a linear projection of x_t: alpha_t = sigmoid(k_t W1 W2 + b)^(1/tau), with W1 (D, r), W2 (r, D),
b (D) per head (one set shared by every head when num_heads is 1). log alpha is floored at MIN_LOG_GATE per
step (a gate below exp(-5) forgets all but 0.7%), which keeps the chunked form's exponents in float32 range.

Renderings (this folder, as fla's ops/gla): `naive` (the token loop, also the encoder form by its definition),
`chunk` (training: chunks of CHUNK positions), `recurrent` (the decoding step). Padded positions get gate 1
and key 0, so they neither write nor decay. The encoder (causal=False) form weights key j by the gates
between it and the query on either side (`symmetric_decay`); the per-head RMS norm follows (`output_norm`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
from torch import Tensor, nn

from attnbench.baselines.gla.chunk import CausalPass, chunk_gated_recurrence, symmetric_decay
from attnbench.baselines.gla.naive import naive_gated_recurrence, naive_symmetric_decay
from attnbench.baselines.gla.recurrent import gated_recurrence_step
from attnbench.kernels import fla_route
from attnbench.kernels.gated_recurrence import GatedRecurrence, Renderings
from attnbench.kernels.recurrent_attention import RecurrentConfig, real_rows
from attnbench.options import option
from attnbench.registry import register_attention

CHUNK = 16
MIN_LOG_GATE = -5.0


def gated_linear(chunk: int, fla: CausalPass | None = None, chunk_pass: CausalPass | None = None) -> Renderings:
    """The gated linear recurrence's renderings over (q, k, v, log_gate): this folder's naive, chunked (chunks of
    `chunk` positions, or `chunk_pass`) and recurrent forms, the two-sided encoder, and fla's kernel `fla`."""
    return Renderings(
        naive=naive_gated_recurrence,
        chunk=chunk_pass or functools.partial(chunk_gated_recurrence, chunk=chunk),
        step=gated_recurrence_step,
        encoder=symmetric_decay,
        naive_encoder=naive_symmetric_decay,
        fla=fla,
    )


@dataclasses.dataclass
class GLAConfig(RecurrentConfig):
    gate_rank: int = option(16, "rank r of the gate's projection W1 W2 (paper: 16)", minimum=1)
    gate_temperature: float = option(
        16.0,
        "tau: alpha = sigmoid(.)^(1/tau) (paper: 16); at least 0.15, above log(2) / 5 = 0.139, below which a gate at "
        "logit 0 sits at its floor (log alpha = -5), where it has no gradient",
        minimum=0.15,
    )


@register_attention(
    "gla", config=GLAConfig, causal=True, normalised=False, recurrent_state=True, positive_features=False
)
class GLAAttention(GatedRecurrence):
    """Gated linear attention: a per-channel, data-dependent decay of the key-value state."""

    renderings = gated_linear(CHUNK, fla=fla_route.gated_recurrence)

    def __init__(self, cfg: GLAConfig):
        generator = torch.Generator().manual_seed(cfg.seed)  # the short convolution's filters, then the gate's
        super().__init__(cfg, generator)
        heads, d, r = cfg.num_heads, cfg.head_dim, cfg.gate_rank

        def uniform(*shape: int, fan_in: int) -> nn.Parameter:
            bound = 1 / math.sqrt(fan_in)
            return nn.Parameter(torch.empty(shape).uniform_(-bound, bound, generator=generator))

        self.gate_down = uniform(heads, d, r, fan_in=d)
        self.gate_up = uniform(heads, r, d, fan_in=r)
        self.gate_bias = uniform(heads, 1, d, fan_in=r)

    def log_gate(self, k: Tensor) -> Tensor:
        """log alpha (B, H, N, D) from keys (B, H, N, D): logsigmoid(k W1 W2 + b) / tau, floored."""
        logits = k @ self.gate_down @ self.gate_up + self.gate_bias
        return (nn.functional.logsigmoid(logits) / self.cfg.gate_temperature).clamp_min(MIN_LOG_GATE)

    def gated_inputs(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        return q / math.sqrt(q.shape[-1]), real_rows(k, mask), v, real_rows(self.log_gate(k), mask)
