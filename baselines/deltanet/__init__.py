"""DeltaNet: linear attention whose state is updated by the delta rule (Schlag et al. 2021; Yang et al. 2024).

S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T, o_t = S_t^T q_t / sqrt(D): each token replaces, by a
fraction beta_t, the value the memory held for its key. q and k are L2-normalised (fla's qk_norm='l2'; keys
must be, for the update to be a contraction); beta_t = sigmoid(k_t . w_beta + b_beta), a learned projection
of the head's raw key (the paper's x_t W_beta: the attention sees heads, not x_t), per head.

With `allow_neg_eigval`, beta_t = 2 sigmoid(...) in (0, 2), as fla's layers' option of that name: the transition
I - beta_t k_t k_t^T (S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T) has eigenvalue 1 - beta_t along k_t,
in (-1, 1) instead of (0, 1), so a token can flip the sign of what the memory holds for its key: the fix of
Grazzi et al. (ICLR 2025, arXiv 2411.12537, "Unlocking state-tracking in linear RNNs through negative eigenvalues")
that lets a one-layer linear RNN carry parity, which positive eigenvalues cannot at any length.

Renderings (this folder, as fla's ops/delta_rule): `naive` (the token loop), `chunk` (the WY form, for
training), `recurrent` (the decoding step). Padded positions get beta 0 and key 0: they leave S unchanged.
Encoder (causal=False) form, ours: every query reads the memory after the whole sequence was written,
o_i = S_N^T q_i (the delta rule has no natural two-sided form; this is the state a decoder would hold).

Beside fla's layer (fla/layers/delta_net.py): its q and k pass SiLU before the L2 norm (after its short convolution,
or alone without one); ours do with `short_conv` (our convolution ends in SiLU), not without it.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
from torch import Tensor, nn

from attnbench.baselines.deltanet.chunk import chunk_delta_rule
from attnbench.baselines.deltanet.naive import naive_delta_rule
from attnbench.baselines.deltanet.recurrent import delta_rule_step
from attnbench.kernels import fla_route
from attnbench.kernels.gated_recurrence import GatedRecurrence, Renderings
from attnbench.kernels.recurrent_attention import RecurrentConfig, real_rows
from attnbench.options import option
from attnbench.registry import register_attention


def delta_rule(chunk: int) -> Renderings:
    """The delta rule's renderings over (q, k, v, beta[, log_gate]): this folder's naive, chunked (WY, chunks of
    `chunk` positions) and recurrent forms, fla's kernel, and the final state read by every query as the encoder."""
    return Renderings(
        naive=naive_delta_rule,
        chunk=functools.partial(chunk_delta_rule, chunk=chunk),
        step=delta_rule_step,
        fla=fla_route.delta_rule,
    )


@dataclasses.dataclass
class DeltaNetConfig(RecurrentConfig):
    chunk_size: int = option(64, "positions per chunk of the WY training form", minimum=1, maximum=4096)
    allow_neg_eigval: bool = option(
        False,
        "beta = 2 sigmoid(...) in (0, 2): the transition I - beta k k^T may take negative eigenvalues, so a token "
        "can flip the state's sign along its key (state tracking, e.g. parity; Grazzi et al. 2025, arXiv 2411.12537; "
        "fla's option of that name); false = beta in (0, 1), eigenvalues in (0, 1)",
    )


@register_attention(
    "deltanet", config=DeltaNetConfig, causal=True, normalised=False, recurrent_state=True, positive_features=False
)
class DeltaNetAttention(GatedRecurrence):
    """The delta rule, learned write strength beta_t in (0, 1) ((0, 2): `allow_neg_eigval`), L2-normalised q, k."""

    def __init__(self, cfg: DeltaNetConfig):
        super().__init__(cfg)
        self.renderings = delta_rule(cfg.chunk_size)
        bound, generator = 1 / math.sqrt(cfg.head_dim), torch.Generator().manual_seed(cfg.seed)
        beta_weight = torch.empty(cfg.num_heads, cfg.head_dim, 1).uniform_(-bound, bound, generator=generator)
        self.beta_weight = nn.Parameter(beta_weight)
        self.beta_bias = nn.Parameter(torch.zeros(cfg.num_heads, 1, 1))

    def gated_inputs(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        """q / sqrt(D) and k, both L2-normalised, v, and beta (B, H, N) from the raw keys (doubled with
        `allow_neg_eigval`); padding zeroed."""
        beta = torch.sigmoid(k @ self.beta_weight + self.beta_bias)[..., 0]
        if self.cfg.allow_neg_eigval:
            beta = 2 * beta
        q = nn.functional.normalize(q, dim=-1) / math.sqrt(q.shape[-1])
        return q, real_rows(nn.functional.normalize(k, dim=-1), mask), v, real_rows(beta, mask)
