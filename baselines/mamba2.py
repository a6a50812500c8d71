"""Mamba-2 (Dao and Gu 2024, "Transformers are SSMs"; SSD, the state-space dual) in the attention slot.

Per head, with x_t the head's value: h_t = exp(dt_t A) h_{t-1} + B_t (dt_t x_t)^T, y_t = h_t^T C_t + D x_t, out_t =
y_t * silu(z_t), then the per-head RMS norm (`output_norm`, Mamba-2's gated RMSNorm norm(y * silu(z))). A = -exp(A_log)
< 0 and D are learned per head, dt_t = softplus(x_t . w_dt + dt_bias) > 0 is input-dependent, so exp(dt_t A) in
(0, 1) is a scalar decay per head and position: the recurrence is GLA's with one gate per head (fla's simple GLA),
with B_t as keys, C_t as queries (no 1/sqrt(D)) and dt-scaled values; its renderings are GLA's (`attnbench.baselines.gla`)
with the head-wise chunked form. Initialisation as the reference block (state-spaces/mamba, `Mamba2`): A ~ U(1, 16),
dt ~ log-uniform(1e-3, 1e-1) through dt_bias (`dt_range`), D = 1. Padded positions write nothing and keep the state.

In the attention slot (the model hands over each head's q, k, v, linear projections of the token): C = q, B = k,
x = v, and dt and the gate z = x W_z (W_z (D, D) per head) are projections of the head's x, where Mamba-2 projects
them from the token; the state is (D, D) per head (Mamba-2's d_state is the key width, here head_dim); B and C are
per head (Mamba-2 shares one B, C across heads: ngroups = 1). The short convolution on x, B and C (Mamba-2's conv1d,
4 taps, + SiLU) is the `short_conv` option; it runs before dt and z are read. Encoder (causal=False) form: the
two-sided decay of GLA's encoder over the same gates (as bidirectional SSMs, e.g. Hydra, read the sequence both ways).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
from torch import Tensor, nn

from attnbench.baselines.gla import gated_linear
from attnbench.baselines.gla.chunk import chunk_headwise_recurrence
from attnbench.kernels import fla_route
from attnbench.kernels.gated_recurrence import GatedRecurrence
from attnbench.kernels.recurrent_attention import RecurrentConfig, real_rows
from attnbench.options import option, require
from attnbench.registry import register_attention

DT_RANGE = (1e-3, 1e-1)  # the reference block's dt_min, dt_max
A_RANGE = (1.0, 16.0)  # the reference block's A_init_range


class SelectiveDecay(nn.Module):
    """Mamba-2's input-dependent step: dt = softplus(x . w_dt + dt_bias) and the log decay dt A, A = -exp(A_log),
    one per head and position, from x (B, H, N, D). Gated DeltaNet takes the same gate (its alpha_t = exp(dt A))."""

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        generator: torch.Generator,
        a_range: tuple[float, float],
        dt_range: tuple[float, float] = DT_RANGE,
    ):
        super().__init__()
        bound = 1 / math.sqrt(head_dim)
        self.weight = nn.Parameter(torch.empty(num_heads, head_dim, 1).uniform_(-bound, bound, generator=generator))
        low, high = (math.log(x) for x in dt_range)
        dt = torch.exp(torch.rand(num_heads, 1, 1, generator=generator) * (high - low) + low)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.a_log = nn.Parameter(torch.empty(num_heads, 1, 1).uniform_(*a_range, generator=generator).log())

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """dt and the log decay dt A, each (B, H, N, 1)."""
        dt = nn.functional.softplus(x @ self.weight + self.dt_bias)
        return dt, -self.a_log.exp() * dt


@dataclasses.dataclass
class Mamba2Config(RecurrentConfig):
    chunk_size: int = option(64, "positions per chunk of the training form", minimum=1, maximum=4096)
    dt_range: list[float] = option(
        list(DT_RANGE), "[dt_min, dt_max]: the initial dt, log-uniform between them (the reference block's)"
    )

    def __post_init__(self) -> None:
        low, high = (self.dt_range + [0.0, 0.0])[:2]
        require(
            len(self.dt_range) == 2 and 0 < low <= high,
            f"dt_range={self.dt_range} must be [dt_min, dt_max] with 0 < dt_min <= dt_max, e.g. {list(DT_RANGE)}",
        )


@register_attention(
    "mamba2", config=Mamba2Config, causal=True, normalised=False, recurrent_state=True, positive_features=False
)
class Mamba2Attention(GatedRecurrence):
    """Mamba-2's SSD: a scalar input-dependent decay per head, B and C as keys and queries, D skip and gate z."""

    def __init__(self, cfg: Mamba2Config):
        super().__init__(cfg)
        chunk = functools.partial(chunk_headwise_recurrence, chunk=cfg.chunk_size)
        self.renderings = gated_linear(cfg.chunk_size, fla=fla_route.headwise_recurrence, chunk_pass=chunk)
        generator = torch.Generator().manual_seed(cfg.seed)
        heads, d = cfg.num_heads, cfg.head_dim
        self.decay = SelectiveDecay(heads, d, generator, A_RANGE, tuple(cfg.dt_range))
        bound = 1 / math.sqrt(d)
        self.gate = nn.Parameter(torch.empty(heads, d, d).uniform_(-bound, bound, generator=generator))
        self.skip = nn.Parameter(torch.ones(heads, 1, 1))

    def gated_inputs(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        """C, B, dt x and the log decay dt A (B, H, N, 1); padded positions write nothing and keep the state."""
        dt, log_gate = self.decay(v)
        return q, real_rows(k, mask), v * dt, real_rows(log_gate, mask)

    def readout(self, out: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """y = out + D x, gated by silu(z), z = x W_z."""
        return (out + self.skip * v) * nn.functional.silu(v @ self.gate)
