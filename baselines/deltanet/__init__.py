"""DeltaNet: linear attention whose state is updated by the delta rule (Schlag et al. 2021; Yang et al. 2024).

S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T, o_t = S_t^T q_t / sqrt(D): each token replaces, by a
fraction beta_t, the value the memory held for its key. q and k are L2-normalised (fla's qk_norm='l2'; keys
must be, for the update to be a contraction); beta_t = sigmoid(k_t . w_beta + b_beta), a learned projection
of the head's raw key (the paper's x_t W_beta: the attention sees heads, not x_t), per head.

Renderings (this folder, as fla's ops/delta_rule): `naive` (the token loop), `chunk` (the WY form, for
training), `recurrent` (the decoding step). Padded positions get beta 0 and key 0: they leave S unchanged.
Encoder (causal=False) form, ours: every query reads the memory after the whole sequence was written,
o_i = S_N^T q_i (the delta rule has no natural two-sided form; this is the state a decoder would hold).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from attnbench.baselines.deltanet.chunk import chunk_delta_rule
from attnbench.baselines.deltanet.naive import naive_delta_rule
from attnbench.baselines.deltanet.recurrent import delta_rule_step
from attnbench.kernels import fla_route
from attnbench.kernels.recurrent_attention import RecurrentAttention, RecurrentConfig, State, real_rows
from attnbench.options import option
from attnbench.registry import register_attention


@dataclasses.dataclass
class DeltaNetConfig(RecurrentConfig):
    chunk_size: int = option(64, "positions per chunk of the WY training form", minimum=1, maximum=4096)


@register_attention(
    "deltanet", config=DeltaNetConfig, causal=True, normalised=False, recurrent_state=True, positive_features=False
)
class DeltaNetAttention(RecurrentAttention):
    """The delta rule with a learned write strength beta_t in (0, 1) and L2-normalised keys and queries."""

    def __init__(self, cfg: DeltaNetConfig):
        super().__init__(cfg)
        bound = 1 / math.sqrt(cfg.head_dim)
        self.beta_weight = nn.Parameter(torch.empty(cfg.num_heads, cfg.head_dim, 1).uniform_(-bound, bound))
        self.beta_bias = nn.Parameter(torch.zeros(cfg.num_heads, 1, 1))

    def _inputs(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """q / sqrt(D) and k, both L2-normalised, and beta (B, H, N) from the raw keys; padding zeroed."""
        beta = torch.sigmoid(k @ self.beta_weight + self.beta_bias)[..., 0]
        q = nn.functional.normalize(q, dim=-1) / math.sqrt(q.shape[-1])
        return q, real_rows(nn.functional.normalize(k, dim=-1), mask), real_rows(beta, mask)

    def parallel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        q, k, beta = self._inputs(q, k, mask)
        if self.takes_fla(q):
            out, state = fla_route.delta_rule(q, k, v, beta)
        else:
            out, state = chunk_delta_rule(q, k, v, beta, self.cfg.chunk_size)
        return out if self.causal else q @ state

    def naive(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        q, k, beta = self._inputs(q, k, mask)
        out, state = naive_delta_rule(q, k, v, beta)
        return out if self.causal else q @ state

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        d = self.cfg.head_dim
        return {"kv": torch.zeros(batch_size, heads, d, d, dtype=dtype, device=device)}

    def core_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        q, k, beta = self._inputs(q_t[:, :, None], k_t[:, :, None], None)
        out, kv = delta_rule_step(q[:, :, 0], k[:, :, 0], v_t, beta[:, :, 0], state["kv"])
        return out, {"kv": kv}
