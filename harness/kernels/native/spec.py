"""What the fused kernels need of a feature map (`NativeSpec`), as feature maps declare it."""

from __future__ import annotations

import dataclasses

from torch import Tensor


@dataclasses.dataclass
class NativeSpec:
    """What the fused kernel needs of a feature map: phi = scale * (f(x' w) * row weights + offset).

    kind: "favor" (f = exp(u - max), key row weights exp(row max - norm_coef |x|^2 - L)), "elu" (elu + 1),
    "trig" ([sin, cos], 2M features), or one of the paper's renormalised maps (PAPER_KINDS, feature_maps' paper
    form): "softmaxfeat" (exp(u - max)), "elu-paper" (max(elu(u + bias) + 1, floor)), "softplus" (softplus(u) +
    floor), "sigmoid2" (sigmoid(u)^2), "cos2" (cos(u + phase)^2), whose key row weights are sqrt(M) / max(sum f,
    floor) and whose queries keep f (their normaliser cancels in the attention's ratio). weights: (heads or 1, d, M)
    float32 contiguous, or None for no projection (M = d); unit_eps: normalise x to x / (|x| + unit_eps) first (RFA),
    None for no normalising; phase: cos2's (heads or 1, M), as many heads as weights.
    """

    kind: str
    weights: Tensor | None
    scale: float = 1.0
    offset: float = 0.0
    norm_coef: float = 0.0
    unit_eps: float | None = None
    floor: float = 0.0
    bias: float = 0.0
    phase: Tensor | None = None

    @property
    def num_features(self) -> int:
        m = self.weights.shape[-1] if self.weights is not None else -1
        return 2 * m if self.kind == "trig" else m
