"""BASED (Arora et al., ICML 2024): Taylor linear attention plus exact softmax over a sliding window.

q and k are projected per head to `feature_dim` (paper: 16) dimensions by learned W_q, W_k (D, d); scores
s_ij = q~_i . k~_j / sqrt(d). BASED pairs linear-attention layers with sliding-window layers; here one
attention does both, with one normaliser: keys within the window (the last `window` positions, the query's
own included; in the encoder, the keys less than `window` away on either side) weigh exactly exp(s_ij), the
keys beyond it the second-order Taylor kernel 1 + s + s^2/2 = phi(q~) . phi(k~) (`TaylorFeatureMap`), so
out_i = sum_j weight_ij v_j / sum_j weight_ij. With the window as long as the sequence it is softmax attention
of q~, k~. The paper's short convolution is the `short_conv` option.

Renderings (this folder): `naive` (query by query, from the definition), `chunk` (training: bands of the
window plus prefix sums of features), `recurrent` (decoding: the window's keys plus a Taylor state).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from attnbench.baselines.based.chunk import chunk_based
from attnbench.baselines.based.feature_map import TaylorFeatureMap
from attnbench.baselines.based.naive import naive_based
from attnbench.baselines.based.recurrent import based_step, init_based_state
from attnbench.kernels.recurrent_attention import RecurrentAttention, State
from attnbench.kernels.short_conv import ShortConvConfig, unfiltered
from attnbench.options import option
from attnbench.registry import register_attention


@dataclasses.dataclass
class BasedConfig(ShortConvConfig):
    feature_dim: int = option(
        16,
        "d: q and k are projected to d dimensions for the Taylor map of 1 + d + d^2 features (paper: 16)",
        minimum=1,
        maximum=64,
    )
    window: int = option(
        64, "w: keys within w positions (the query's own included) get exact softmax weights (paper: 64)", minimum=1
    )


@register_attention(
    "based", config=BasedConfig, causal=True, recurrent_state=True, normalised=unfiltered, positive_features=False
)  # Taylor features go negative; their kernel 1 + s + s^2/2 does not
class BasedAttention(RecurrentAttention):
    """Taylor-feature linear attention beyond a sliding window, exact softmax within it, one normaliser."""

    def __init__(self, cfg: BasedConfig):
        generator = torch.Generator().manual_seed(cfg.seed)  # the short convolution's filters, then the projections
        super().__init__(cfg, generator)
        scale, shape = 1 / math.sqrt(cfg.head_dim), (cfg.num_heads, cfg.head_dim, cfg.feature_dim)
        self.project_q = nn.Parameter(torch.randn(shape, generator=generator) * scale)
        self.project_k = nn.Parameter(torch.randn(shape, generator=generator) * scale)
        self.feature_map = TaylorFeatureMap(cfg.feature_dim)

    def parallel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return chunk_based(
            q @ self.project_q, k @ self.project_k, v, self.cfg.window, self.causal, mask, self.feature_map
        )

    def naive(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return naive_based(q @ self.project_q, k @ self.project_k, v, self.cfg.window, self.causal, mask)

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        return init_based_state(
            batch_size, heads, self.cfg.feature_dim, self.cfg.head_dim, self.cfg.window, dtype, device
        )

    padding_takes_positions = True  # the window counts positions, padded ones included (chunk.window_part)

    def core_step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State, real_t: Tensor | None = None
    ) -> tuple[Tensor, State]:
        q, k = (x[:, :, None] @ w for x, w in ((q_t, self.project_q), (k_t, self.project_k)))
        return based_step(q[:, :, 0], k[:, :, 0], v_t, state, self.cfg.window, self.feature_map, real_t)
