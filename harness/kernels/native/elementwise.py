"""Element-wise kernels: the hash dropout's mask (attnbench.dropout) and the kernels' exp (for its accuracy test)."""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.kernels.native import runtime
from attnbench.kernels.native.shapes import expect, expect_size


def dropout(x: Tensor, threshold: int, scale: float, seed: int, threads: int = 1) -> Tensor:
    """The kernels' hashed dropout (attnbench.dropout) of a contiguous float32 CPU tensor: 0 where the draw of
    (seed, element index) lies below threshold (of 2^32), else x * scale."""
    expect("dropout", "x", x, tuple(x.shape))
    out = torch.empty_like(x)
    runtime.call("attnbench_dropout", x.data_ptr(), x.numel(), threshold, scale, seed, threads, out.data_ptr())
    return out


def exp(x: Tensor) -> Tensor:
    """The kernels' exp of a contiguous float32 tensor whose size is a multiple of 16 (for its accuracy test)."""
    expect("exp", "x", x, tuple(x.shape))
    expect_size("exp", "the element count", x.numel(), multiple=16, at_least=0)
    out = torch.empty_like(x)
    runtime.library().attnbench_exp(x.data_ptr(), x.numel(), out.data_ptr())
    return out
