"""Floating-point operations and minimum bytes moved by one attention call: the numerators of the roofline.

An attention module may define `cost(batch, heads, n, d) -> {"flops": float, "bytes": float}` for
its forward pass in float32 (bytes scale with the element size for other dtypes); otherwise the
formula for its family below applies. Counts are matrix-multiply FLOPs (2 per multiply-add), the
dominant term; minimum bytes are reading q, k, v and writing the output once (plus any parameter
that must be read). Training (forward + backward) is counted as 3x the forward FLOPs and 2x the
forward bytes (gradients of the inputs are written and the output gradient read).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

TRAIN_FLOP_FACTOR = 3.0
TRAIN_BYTE_FACTOR = 2.0
NEWTON_SCHULZ_ITERATIONS = 6  # pinv iterations in the Nystromformer reference
NYSTROM_CONV_KERNEL = 33  # depthwise convolution over V in the reference


def _feature_map_cost(module: nn.Module, b: int, h: int, n: int, d: int) -> dict[str, float]:
    """Feature-map attention: features of q and k (projections onto omega), then phi_k^T [v, 1] and phi_q kv."""
    feature_map = module.feature_map
    m_out = feature_map.num_features
    omega = getattr(feature_map, "omega", None)
    projection = 0.0 if omega is None else 2 * 2.0 * b * h * n * omega.shape[-2] * d
    flops = projection + 2 * 2.0 * b * h * n * m_out * (d + 1)
    parameter_bytes = 0.0 if omega is None else omega.numel() * 4.0
    return {"flops": flops, "bytes": 4.0 * b * h * n * d * 4 + parameter_bytes}


def _softmax_cost(b: int, h: int, n: int, d: int) -> dict[str, float]:
    return {"flops": 4.0 * b * h * n * n * d, "bytes": 4.0 * b * h * n * d * 4}


def _nystrom_cost(module: nn.Module, b: int, h: int, n: int, d: int) -> dict[str, float]:
    m = min(module.cfg.num_landmarks, n)
    kernels = 2.0 * n * m * d * 2 + 2.0 * m * m * d
    pinv = NEWTON_SCHULZ_ITERATIONS * 4 * 2.0 * m**3
    products = 2.0 * m * n * d + 2.0 * n * m * m + 2.0 * n * m * d
    conv = 2.0 * n * d * NYSTROM_CONV_KERNEL
    return {"flops": b * h * (kernels + pinv + products + conv), "bytes": 4.0 * b * h * n * d * 4}


def _linformer_cost(module: nn.Module, b: int, h: int, n: int, d: int) -> dict[str, float]:
    k = module.cfg.projected_length
    flops = b * h * (2 * 2.0 * k * n * d + 2 * 2.0 * n * k * d)  # project K and V along n, then scores and AV
    return {"flops": flops, "bytes": 4.0 * b * h * n * d * 4 + 2.0 * k * n * 4}


def forward_cost(module: nn.Module, name: str, batch: int, heads: int, n: int, d: int) -> dict[str, float] | None:
    """FLOPs and minimum bytes (float32) of one forward call at (batch, heads, n, d); None if unknown."""
    hook = getattr(module, "cost", None)
    if callable(hook):
        return {k: float(v) for k, v in hook(batch, heads, n, d).items()}
    if hasattr(module, "feature_map"):
        return _feature_map_cost(module, batch, heads, n, d)
    if name == "softmax":
        return _softmax_cost(batch, heads, n, d)
    if name.startswith("nystrom"):
        return _nystrom_cost(module, batch, heads, n, d)
    if name.startswith("linformer"):
        return _linformer_cost(module, batch, heads, n, d)
    return None


def point_cost(
    module: nn.Module, name: str, batch: int, heads: int, n: int, d: int, mode: str, dtype: torch.dtype
) -> dict[str, Any] | None:
    """FLOPs and minimum bytes of a forward or training call in `dtype`; None when no formula is known."""
    cost = forward_cost(module, name, batch, heads, n, d)
    if cost is None:
        return None
    scale = torch.finfo(dtype).bits / 32
    if mode == "train":
        return {"flops": cost["flops"] * TRAIN_FLOP_FACTOR, "bytes": cost["bytes"] * TRAIN_BYTE_FACTOR * scale}
    return {"flops": cost["flops"], "bytes": cost["bytes"] * scale}
