"""ELU linear attention ("Transformers are RNNs", Katharopoulos et al. 2020): phi(x) = elu(x) + 1."""

from __future__ import annotations

import dataclasses

from torch import Tensor

from attnbench.baselines.feature_maps import elu_plus_one
from attnbench.kernels.linear.attention import LinearKernelAttention
from attnbench.kernels.linear.contract import FeatureChunk, FeatureMap
from attnbench.kernels.native import NativeSpec
from attnbench.kernels.short_conv import ShortConvConfig, short_conv_for, unfiltered
from attnbench.options import option, require
from attnbench.registry import register_attention


class EluFeatureMap(FeatureMap):
    """phi(x) = elu(x) + 1, deterministic and positive: (B, H, N, D) -> (B, H, N, D)."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.num_features = head_dim

    def native_spec(self, x: Tensor) -> NativeSpec:
        return NativeSpec("elu", None)

    def query_chunk(self, x: Tensor, out: Tensor | None = None) -> FeatureChunk:
        return FeatureChunk(elu_plus_one(x, out))

    def cost(self, n: int, d: int) -> dict[str, float]:
        """FLOPs per (batch, head) of the features of n queries and n keys (clamp, exp, relu, add); no parameters."""
        return {"flops": 2 * 4.0 * n * d, "bytes": 0.0}


@dataclasses.dataclass
class EluLinearConfig(ShortConvConfig):
    eps: float = option(1e-6, "guard added to the normaliser phi(q) . sum_j phi(k_j)")

    def __post_init__(self) -> None:
        require(self.eps > 0, f"eps={self.eps} must be positive")


@register_attention("elu-linear", config=EluLinearConfig, causal=True, normalised=unfiltered)
class EluLinearAttention(LinearKernelAttention):
    """phi(Q)(phi(K)^T V) / (phi(Q) sum_j phi(K_j) + eps), phi = elu + 1; causal form by prefix sums."""

    def __init__(self, cfg: EluLinearConfig):
        super().__init__(EluFeatureMap(cfg.head_dim), eps=cfg.eps, causal=cfg.causal, short_conv=short_conv_for(cfg))
        self.cfg = cfg
