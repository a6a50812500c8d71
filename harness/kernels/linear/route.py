"""Route choice: the one place that decides which rendering runs a feature-map attention's call."""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.kernels import native
from attnbench.kernels.cpu_threads import torch_threads
from attnbench.kernels.linear.chunked import pytorch_chunked_attention
from attnbench.kernels.linear.contract import FeatureMap
from attnbench.kernels.linear.fused import fused_linear_attention
from attnbench.kernels.native import NativeSpec

Route = str  # "native", "native-training", "pytorch-chunked", "pytorch-factored", "pytorch-causal" (attnbench.kernels.routes)


def choose_route(
    feature_map: FeatureMap, q: Tensor, k: Tensor, v: Tensor, causal: bool = False
) -> tuple[Route, NativeSpec | None]:
    """The one place that decides how a feature-map attention runs, from the map's fast form (its `native_spec`),
    the device and dtype and widths (`native.supports`), whether gradients are wanted, and whether the map's
    projection takes gradients (`native.supports_backward`) -> (route, spec for the native routes):
    - causal: "pytorch-causal" (the chunked prefix sums over materialised features);
    - gradients off: "native" where the kernels take the call, else "pytorch-chunked";
    - gradients on: "native-training" where the kernels and their backward take it (d == Dv, no input
      normalising; a projection taking gradients gets them too; without a tensor that records gradients the
      kernels run their forward alone), else "pytorch-factored" (autograd through the factored form).
    The kernels themselves choose their team of threads from the work size (`team` in the source)."""
    if causal:
        return "pytorch-causal", None
    spec = feature_map.native_spec(q) if hasattr(feature_map, "native_spec") else None
    if not torch.is_grad_enabled():
        return ("native", spec) if native.supports(spec, q, k, v) else ("pytorch-chunked", None)
    if native.supports_backward(spec, q, k, v):
        return "native-training", spec
    return "pytorch-factored", None


@torch.no_grad()
def chunked_linear_attention(
    feature_map: FeatureMap,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    eps: float = 1e-6,
    rows: int | None = None,
) -> Tensor:
    """The non-causal kernel without gradients: q, k (B, H, N, Dk), v (B, H, N, D) -> (B, H, N, D), by the route
    `choose_route` picks: the fused kernels (`fused_linear_attention`) or `pytorch_chunked_attention`; given
    `rows`, always the latter with that many rows per block. Equals `linear_attention(feature_map.forward_queries(q),
    feature_map.forward_keys(k, mask), v, mask, eps)` up to rounding."""
    if rows is None:
        threads = torch.get_num_threads()
        with feature_map.holding_derived(), torch_threads(1):  # the map's derived weights too; see `torch_threads`
            route, spec = choose_route(feature_map, q, k, v)
        if route == "native":
            return fused_linear_attention(spec, q, k, v, key_padding_mask, eps, threads)
    return pytorch_chunked_attention(feature_map, q, k, v, key_padding_mask, eps, rows)
