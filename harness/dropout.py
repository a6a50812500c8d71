"""Dropout from a counter-based random source: one seed per call, each element's draw a hash of (seed, index).

nn.Dropout draws each element from torch's CPU generator (bernoulli_), which took a fifth of a paper-scale training
step here. `HashDropout` draws one 63-bit seed from torch's default generator per call (so `torch.manual_seed`
still fixes every mask: same seed, same numbers) and keeps element i of the flattened tensor where
lowbias32(lowbias32(lo(i) ^ k0) ^ k1 ^ hi(i) GOLDEN) >= p 2^32, with keys k0 = lowbias32(lo(seed)) and
k1 = lowbias32(hi(seed) ^ k0) (lowbias32: C. Wellons' integer hash, a bijection of 32 bits; lo, hi the low and high
32 bits; products mod 2^32), scaling kept elements by 1 / (1 - p). The backward
recomputes the same mask from the seed, so nothing is stored. The fused kernel (`attnbench.kernels.native.dropout`) runs
it on CPU float32; elsewhere `hashed_keep` computes the same mask in torch operations (bitwise the same: tests).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnbench.kernels import native

MASK32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9


def _lowbias32(x):
    """The hash on Python ints or int64 tensors holding 32-bit values (only the products' low 32 bits are kept)."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)


def hashed_keep(numel: int, p: float, seed: int, device: torch.device | str = "cpu") -> Tensor:
    """The keep mask (numel,) bool of HashDropout with rate p and this seed, in torch operations."""
    return draws(torch.arange(numel, device=device, dtype=torch.int64), seed) >= threshold(p)


def draws(index: Tensor, seed: int) -> Tensor:
    """The 32-bit draws (int64) of these element indices (int64, >= 0) under `seed`."""
    k0 = _lowbias32(seed & MASK32)
    k1 = _lowbias32((seed >> 32) ^ k0)
    return _lowbias32(_lowbias32((index & MASK32) ^ k0) ^ k1 ^ (((index >> 32) * GOLDEN) & MASK32))


def threshold(p: float) -> int:
    """Draws below this (of 2^32) are dropped: p 2^32, rounded."""
    return min(MASK32, round(p * 2.0**32))


def _apply(x: Tensor, p: float, seed: int) -> Tensor:
    scale = 1.0 / (1.0 - p)
    if x.device.type == "cpu" and x.dtype == torch.float32 and native.library() is not None:
        return native.dropout(x.contiguous(), threshold(p), scale, seed, torch.get_num_threads()).view(x.shape)
    keep = hashed_keep(x.numel(), p, seed, x.device).view(x.shape)
    return torch.where(keep, x * scale, torch.zeros((), dtype=x.dtype, device=x.device))


class _HashDropout(torch.autograd.Function):
    """x -> the dropped x; the backward drops the gradient with the same seed (the same mask, recomputed)."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float, seed: int) -> Tensor:
        ctx.p, ctx.seed = p, seed
        return _apply(x, p, seed)

    @staticmethod
    def backward(ctx, g: Tensor):
        return _apply(g, ctx.p, ctx.seed), None, None


def hash_dropout(x: Tensor, p: float, seed: int) -> Tensor:
    """Dropout of x at rate p with the mask of `seed` (`hashed_keep`), differentiable."""
    return _HashDropout.apply(x, p, seed)


def draw_seed() -> int:
    """A 63-bit seed from torch's default CPU generator (fixed by torch.manual_seed)."""
    return int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64))


class HashDropout(nn.Module):
    """nn.Dropout's contract (identity in eval mode or at p = 0; else zeroes elements with probability p and scales
    the rest by 1 / (1 - p)) with a hashed mask from one seed per call."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout rate p={p} must lie in [0, 1)")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        return hash_dropout(x, self.p, draw_seed())

    def extra_repr(self) -> str:
        return f"p={self.p}"
