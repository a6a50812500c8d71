"""Hedgehog (Zhang et al., ICLR 2024): linear attention with a learned feature map distilled to mimic softmax.

phi(x) = softmax([x W, -x W]) over its 2 d' entries, with W (D, d') learned per head (identity at the start,
as fla's HedgehogFeatureMap; one W for every head when num_heads is 1), over the shared linear kernel
(`attnbench.kernels.linear`). Its learning phase (phase A, `distillation`) trains W alone to match
each layer's softmax attention weights on the training data (cross-entropy between the weight rows, the
paper's eq. 5); W then stays frozen in phase B, as phase-A parameters do.

Renderings (this folder): `naive` (query by query from the definition), the parallel form (the shared kernel:
factored, chunked or causal prefix sums, `choose_route`), `recurrent` (the decoding step).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from attnbench.baselines.hedgehog.naive import naive_feature_attention
from attnbench.baselines.hedgehog.recurrent import feature_attention_step
from attnbench.kernels.linear.attention import LinearKernelAttention
from attnbench.kernels.linear.contract import FeatureMap
from attnbench.kernels.recurrent_attention import RecurrentAttention, State
from attnbench.kernels.short_conv import ShortConvConfig, unfiltered
from attnbench.options import option, require
from attnbench.registry import register_attention


class HedgehogFeatureMap(FeatureMap):
    """phi(x) = softmax([x W, -x W]): (B, H, N, D) -> (B, H, N, 2 d'); W (heads, D, d')."""

    def __init__(self, num_heads: int, head_dim: int, feature_dim: int):
        super().__init__()
        self.num_features = 2 * feature_dim
        self.weight = nn.Parameter(torch.eye(head_dim, feature_dim).repeat(num_heads, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        y = x @ self.weight
        return torch.softmax(torch.cat([y, -y], dim=-1), dim=-1)

    def cost(self, n: int, d: int) -> dict[str, float]:
        """FLOPs per (batch, head) of the features of n queries and n keys (projection, exp, sum, divide)."""
        m = self.num_features
        return {"flops": 2 * n * (d * m + 3.0 * m), "bytes": 4.0 * self.weight.numel()}


@dataclasses.dataclass
class HedgehogConfig(ShortConvConfig):
    feature_dim: int | None = option(
        None,
        "d': W maps each head's D dimensions to d' (2 d' features); None = D (the paper's and fla's choice)",
        minimum=1,
    )
    eps: float = option(
        1e-12,
        "guard added to the normaliser phi(q) . sum_j phi(k_j) (features sum to 1, so "
        "the normaliser is of order 1 / d'; ELU's 1e-6 would bias it)",
    )

    def __post_init__(self) -> None:
        require(self.eps > 0, f"eps={self.eps} must be positive")


@register_attention(
    "hedgehog",
    config=HedgehogConfig,
    causal=True,
    recurrent_state=True,
    normalised=unfiltered,
    learning_phase="attnbench.baselines.hedgehog.distillation:distill_hedgehog",
)
class HedgehogAttention(RecurrentAttention):
    """Linear attention over a learned softmax feature map, distilled to softmax attention in phase A."""

    def __init__(self, cfg: HedgehogConfig):
        super().__init__(cfg)
        self.feature_map = HedgehogFeatureMap(cfg.num_heads, cfg.head_dim, cfg.feature_dim or cfg.head_dim)
        self.kernel = LinearKernelAttention(self.feature_map, eps=cfg.eps, causal=cfg.causal)

    @property
    def kernel_routes(self) -> dict[str, int]:
        """The shared kernel's routes (`attnbench.kernels.routes`), recorded with results."""
        return self.kernel.kernel_routes

    def learning_phase_parameters(self) -> list[nn.Parameter]:
        """What phase A (distillation) trains and phase B leaves alone: the feature map's W."""
        return [self.feature_map.weight]

    def parallel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return self.kernel(q, k, v, key_padding_mask=mask)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return naive_feature_attention(self.feature_map(q), self.feature_map(k), v, self.causal, mask, self.cfg.eps)

    def core_state(self, batch_size: int, heads: int, dtype: torch.dtype, device: torch.device) -> State:
        m, d = self.feature_map.num_features, self.cfg.head_dim
        return {"kv": torch.zeros(batch_size, heads, m, d + 1, dtype=dtype, device=device)}

    def core_step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: State) -> tuple[Tensor, State]:
        phi_q, phi_k = self.feature_map(q_t[:, :, None])[:, :, 0], self.feature_map(k_t[:, :, None])[:, :, 0]
        out, kv = feature_attention_step(phi_q, phi_k, v_t, state["kv"], self.cfg.eps)
        return out, {"kv": kv}

    def distillation_loss(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        """Phase A's objective on one call's inputs (B, H, N, D): the mean over real queries and heads of the
        cross-entropy -sum_j A_ij log A^_ij between softmax weights A (the teacher, softmax(q k^T / sqrt(D)))
        and this map's weights A^ (phi(q_i) . phi(k_j) / sum_j), on the (short-convolved) q, k it would see."""
        if self.short_conv is not None:
            q, k, _ = self.short_conv(q, k, k, mask)
        b, _, n, d = q.shape
        allowed = torch.ones(b, 1, n, n, dtype=torch.bool, device=q.device)
        if mask is not None:  # real queries, real keys
            allowed = allowed & mask[:, None, None, :] & mask[:, None, :, None]
        if self.causal:
            allowed = allowed & torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        teacher = torch.softmax((q @ k.transpose(-2, -1) / d**0.5).masked_fill(~allowed, -torch.inf), dim=-1)
        teacher = teacher.nan_to_num(0.0)  # a padded query sees no key
        weights = (self.feature_map(q) @ self.feature_map(k).transpose(-2, -1)) * allowed
        student = weights / (weights.sum(dim=-1, keepdim=True) + self.cfg.eps)
        rows = teacher.sum(dim=-1)  # 1 for a real query, else 0
        cross_entropy = -(teacher * student.clamp_min(1e-30).log()).sum(dim=-1)
        return cross_entropy.sum() / rows.sum().clamp_min(1.0)
