"""Performer / FAVOR+ (Choromanski et al. 2021): positive orthogonal random features for exp(q.k / sqrt(d)).

phi(x) = M^{-1/2} (exp(w x' - |x'|^2/2 - max) + eps), x' = x d^{-1/4}, w orthogonal Gaussian blocks
(`feature_maps.FavorMap`, the scaled form). Features are redrawn on a seeded schedule during
training only, so evaluation is deterministic; the policy is `module.redraw_policy`.
Causal form: the key stabiliser is the first real key's exponent (`feature_maps.causal_favor_keys`), not
the reference's max over all positions, through which later keys would reach earlier outputs (via the
features' eps); so the causal form is exactly causal and runs as a recurrence (`step`).
"""

from __future__ import annotations

import dataclasses

from attnbench.baselines.feature_maps import FavorMap
from attnbench.baselines.random_projections import RowNorms
from attnbench.kernels.linear.attention import LinearKernelAttention
from attnbench.kernels.short_conv import ShortConvConfig, short_conv_for, unfiltered
from attnbench.options import option, require
from attnbench.registry import register_attention


@dataclasses.dataclass
class PerformerConfig(ShortConvConfig):
    num_features: int = option(256, "random features M per head (the reference's default 256)", maximum=65536)
    row_norms: RowNorms = option("chi", "row norms of the orthogonal blocks: chi (Gaussian-like) or sqrt-d")
    orthogonal: bool = option(True, "orthogonal random features (FAVOR+); False draws i.i.d. Gaussian rows")
    redraw_every: int = option(1000, "redraw the features every N training steps (0 = never); never in evaluation")
    eps: float = option(1e-6, "guard keeping the normaliser away from zero")

    def __post_init__(self) -> None:
        require(self.num_features >= 1, f"num_features={self.num_features} must be at least 1")
        require(self.redraw_every >= 0, f"redraw_every={self.redraw_every} must be >= 0 (0 = never redraw)")
        require(self.eps > 0, f"eps={self.eps} must be positive")


@register_attention("performer", config=PerformerConfig, causal=True, normalised=unfiltered)
class PerformerAttention(LinearKernelAttention):
    """FAVOR+ softmax-kernel attention: positive orthogonal random features, linear in length."""

    def __init__(self, cfg: PerformerConfig):
        features = FavorMap(
            cfg.head_dim,
            cfg.num_heads,
            cfg.num_features,
            cfg.seed,
            orthogonal=cfg.orthogonal,
            scaling=cfg.row_norms,
        )
        super().__init__(
            features, eps=cfg.eps, causal=cfg.causal, redraw_every=cfg.redraw_every, short_conv=short_conv_for(cfg)
        )
        self.cfg = cfg
