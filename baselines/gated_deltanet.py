"""Gated DeltaNet (Yang, Kautz, Hatamizadeh, ICLR 2025, arXiv 2412.06464): the delta rule with Mamba-2's decay.

S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t k_t v_t^T (this orientation: S (Dk, Dv) maps keys to values),
o_t = S_t^T q_t / sqrt(D): each token first lets the whole memory fade by alpha_t = exp(g_t) in (0, 1), a
data-dependent scalar per head, then replaces, by a fraction beta_t, the value held for its key. q and k are
L2-normalised, beta_t = sigmoid(k_t . w_beta + b_beta) as DeltaNet's (2 sigmoid(...) with `allow_neg_eigval`, as
fla's layer: the transition alpha_t (I - beta_t k_t k_t^T) then has eigenvalue alpha_t (1 - beta_t) in (-1, 1) along
k_t, negative where beta_t > 1; Grazzi et al. 2025, arXiv 2411.12537), and g_t = -exp(A_log) softplus(k_t . w_a +
dt_bias), the gate of Mamba-2 (`attnbench.baselines.mamba2.SelectiveDecay`; fla's layer: A ~ U(0, 16), dt_bias from
dt ~ log-uniform(1e-3, 1e-1)), both read from the head's raw key (the paper's x_t W: the attention sees heads, not
x_t). Without the gate (alpha = 1) it is DeltaNet, whose renderings it shares (`attnbench.baselines.deltanet`: the
naive loop, the chunked WY form, the step, each with the gate) and whose encoder form it keeps (every query reads the
final memory).

Beside fla's layer (fla/layers/gated_deltanet.py): its q, k, v pass a short convolution and SiLU before the L2 norm,
as ours do with `short_conv` (the convolution ends in SiLU; without it fla still applies SiLU, we do not); fla's
optional output gate (norm(o) * silu(x W_g)) is left out: the per-head RMS norm (`output_norm`) follows alone.
"""

from __future__ import annotations

import dataclasses

from torch import Tensor

from attnbench.baselines.deltanet import DeltaNetAttention, DeltaNetConfig
from attnbench.baselines.mamba2 import SelectiveDecay
from attnbench.baselines.random_projections import seeded_generator
from attnbench.kernels.recurrent_attention import real_rows
from attnbench.registry import register_attention

A_RANGE = (0.0, 16.0)  # fla's layer: A ~ U(0, 16)
GATE_STREAM = 1  # the gate's parameters draw from their own stream of the seed, apart from beta's


@dataclasses.dataclass
class GatedDeltaNetConfig(DeltaNetConfig):
    pass


@register_attention(
    "gated-deltanet",
    config=GatedDeltaNetConfig,
    causal=True,
    normalised=False,
    recurrent_state=True,
    positive_features=False,
)
class GatedDeltaNetAttention(DeltaNetAttention):
    """The delta rule under a data-dependent scalar decay per head (Mamba-2's), L2-normalised q and k."""

    def __init__(self, cfg: GatedDeltaNetConfig):
        super().__init__(cfg)
        self.decay = SelectiveDecay(cfg.num_heads, cfg.head_dim, seeded_generator(cfg.seed, GATE_STREAM), A_RANGE)

    def gated_inputs(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        """DeltaNet's (q, k, v, beta) and the log decay g (B, H, N), read from the raw keys; padding: g = 0."""
        _, log_gate = self.decay(k)
        return *super().gated_inputs(q, k, v, mask), real_rows(log_gate[..., 0], mask)
