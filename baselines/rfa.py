"""Random Feature Attention (Peng et al., ICLR 2021): unit-normalised q, k with sin/cos random features.

phi(x) = M^{-1/2} [sin(W x^), cos(W x^)], x^ = x / (|x| + 1e-3), W = sigma * W_random / tau with a learned
per-head sigma (initialised to 1). In training a fresh seeded W_random is drawn every forward (option);
evaluation always uses the first draw, so it is deterministic. Features are not positive. Built with
num_heads 1, the one head's W and sigma serve every head of a call.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from attnbench.baselines.feature_maps import trig_features
from attnbench.baselines.random_projections import draw_omegas, per_head, projection_weights
from attnbench.kernels.linear.attention import LinearKernelAttention
from attnbench.kernels.linear.contract import FeatureChunk, FeatureMap
from attnbench.kernels.native import NativeSpec
from attnbench.kernels.short_conv import ShortConvConfig, short_conv_for, unfiltered
from attnbench.options import option, require
from attnbench.registry import register_attention

NORM_EPS = 1e-3


class RfaFeatureMap(FeatureMap):
    """Trigonometric random features of unit-normalised inputs: (B, H, N, d) -> (B, H, N, 2M)."""

    def __init__(self, head_dim: int, num_heads: int, num_features: int, seed: int, tau: float, orthogonal: bool):
        super().__init__()
        self.num_features, self.seed, self.tau, self.orthogonal = 2 * num_features, seed, tau, orthogonal
        self.sigma = nn.Parameter(torch.ones(num_heads))
        self.register_buffer("omega", self._draw(num_heads, num_features, head_dim, 0))  # evaluation
        self.register_buffer("train_omega", self.omega.clone(), persistent=False)  # current training draw
        self.draw = 0

    def _draw(self, num_heads: int, num_features: int, head_dim: int, draw: int) -> Tensor:
        return draw_omegas(num_heads, num_features, head_dim, self.seed, orthogonal=self.orthogonal, draw=draw)

    def new_feature_map(self) -> None:
        """Draw the next seeded random matrices for training; evaluation keeps the first draw."""
        self.draw += 1
        self.train_omega.copy_(self._draw(*self.omega.shape, draw=self.draw))

    def native_spec(self, x: Tensor) -> NativeSpec:
        """sin/cos of unit-normalised x projected on sigma omega / tau, (H or 1, d, M)."""
        omega = self.train_omega if self.training else self.omega
        per_head(omega, x.shape[1])  # one error for a head count the parameters cannot serve, on every path
        weights = self.derived(
            "native", lambda: self._projection(omega, 1, x.dtype).contiguous(), self.sigma, omega, key=x.dtype
        )
        return NativeSpec("trig", weights, omega.shape[1] ** -0.5, unit_eps=NORM_EPS)

    def _projection(self, omega: Tensor, batch: int, dtype: torch.dtype, heads: int | None = None) -> Tensor:
        """sigma omega / tau laid out for `batch` and `heads` (`projection_weights`): (B*heads, d, M)."""
        return projection_weights(self.sigma[:, None, None] * omega / self.tau, batch, dtype=dtype, heads=heads)

    def query_chunk(self, x: Tensor, out: Tensor | None = None) -> FeatureChunk:
        omega = self.train_omega if self.training else self.omega
        weights = self.derived(
            "weights",
            lambda: self._projection(omega, x.shape[0], x.dtype, x.shape[1]),
            self.sigma,
            omega,
            key=(x.shape[0], x.shape[1], x.dtype),
        )
        unit = x / (x.norm(dim=-1, keepdim=True) + NORM_EPS)
        return FeatureChunk(trig_features(unit, weights, out), omega.shape[1] ** -0.5)

    def cost(self, n: int, d: int) -> dict[str, float]:
        """FLOPs per (batch, head) of the features of n queries and n keys (norm, divide, project, sin, cos)."""
        h, m, _ = self.omega.shape
        return {"flops": 2 * (3.0 * n * d + 2.0 * n * m * d + 2.0 * n * m), "bytes": 4.0 * h * m * d}


@dataclasses.dataclass
class RfaConfig(ShortConvConfig):
    num_features: int = option(
        64, "random vectors per head (2x as many sin/cos features; reference: 64)", maximum=65536
    )
    tau: float = option(1.0, "temperature dividing the random matrices")
    resample: bool = option(True, "draw new random matrices every training forward (evaluation stays fixed)")
    orthogonal: bool = option(True, "orthogonal Gaussian blocks (True) or i.i.d. Gaussian rows (False)")
    eps: float = option(1e-6, "guard keeping the normaliser (which can change sign) away from zero")

    def __post_init__(self) -> None:
        require(self.num_features >= 1, f"num_features={self.num_features} must be at least 1")
        require(self.tau > 0, f"tau={self.tau} must be positive")
        require(self.eps > 0, f"eps={self.eps} must be positive")


@register_attention("rfa", config=RfaConfig, causal=True, positive_features=False, normalised=unfiltered)
class RfaAttention(LinearKernelAttention):
    """RFA: sin/cos random features of unit-normalised q, k with a learned per-head scale sigma."""

    def __init__(self, cfg: RfaConfig):
        features = RfaFeatureMap(cfg.head_dim, cfg.num_heads, cfg.num_features, cfg.seed, cfg.tau, cfg.orthogonal)
        super().__init__(
            features,
            eps=cfg.eps,
            causal=cfg.causal,
            redraw_every=1 if cfg.resample else 0,
            short_conv=short_conv_for(cfg),
        )
        self.cfg = cfg
