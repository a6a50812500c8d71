"""Kernelized attention with RPE by the fast Fourier transform, O(N log N M D) (Luo et al. 2021, Algorithm 1).

With S_i = sum_j c(i - j) phi(k_j) [v_j, 1]^T, out_i = phi(q_i)^T S_i[:, :D] / phi(q_i)^T S_i[:, D]: every entry of S
is a Toeplitz product along the sequence, y_i = sum_j c(i - j) x_j, i.e. the linear convolution of x with c, which
the FFT computes (`toeplitz_product`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnbench.kernels.recurrent_attention import real_rows

GROUP_VALUES = 1 << 23  # values per group of features in the transforms (32 MiB in float32)


def toeplitz_product(x: Tensor, weights: Tensor, max_distance: int) -> Tensor:
    """y_i = sum_j c(i - j) x_j along the last axis: x (B, H, C, N), weights (H, 2N - 1) from `offset_weights` ->
    (B, H, C, N).

    c is constant beyond K: c(d) = c(K) for d >= K and c(-K) for d <= -K. Those keys are running sums,
    c(K) sum_{j <= i - K} x_j + c(-K) sum_{j >= i + K} x_j; the keys less than K away are a convolution with a kernel
    of 2K - 1 taps, computed by FFT block by block (overlap-save): the outputs of a block of P = K positions need
    the inputs of that block and its two neighbours, one circular convolution of length 3P each, O(N log K) per
    channel. Blocks keep the FFT's rounding relative to a block's inputs; one transform of the whole sequence
    made it relative to all N of them, and float32 lost 1e-3 of an output that way."""
    n = x.shape[-1]
    near = min(max_distance, n)  # |d| < near in the kernel; d never reaches n
    blocks = -(-n // near)
    length = 3 * near
    kernel = torch.zeros(weights.shape[0], length, dtype=weights.dtype, device=weights.device)
    kernel[:, :near] = weights[:, n - 1 : n - 1 + near]  # d = 0 .. near - 1
    if near > 1:
        kernel[:, length - (near - 1) :] = weights[:, n - near : n - 1]  # d = -(near - 1) .. -1, wrapped
    if blocks == 1:  # one block: the whole sequence in one transform of length 3N (> 2N - 1, so no wrap-around)
        spectrum = torch.fft.rfft(x, n=length, dim=-1) * torch.fft.rfft(kernel, dim=-1)[None, :, None, :]
        local = torch.fft.irfft(spectrum, n=length, dim=-1)[..., :n]
    else:
        padded = nn.functional.pad(x, (near, (blocks + 1) * near - n))  # a zero block before, blocks + 2 in all
        padded = padded.view(*x.shape[:-1], blocks + 2, near)
        windows = torch.cat([padded[..., :-2, :], padded[..., 1:-1, :], padded[..., 2:, :]], dim=-1)  # (.., 3P)
        spectrum = torch.fft.rfft(windows, dim=-1) * torch.fft.rfft(kernel, dim=-1)[None, :, None, None, :]
        local = torch.fft.irfft(spectrum, n=length, dim=-1)[..., near : 2 * near].reshape(*x.shape[:-1], -1)[..., :n]
    if near == n:  # no key is K or more positions away
        return local
    before = weights[:, n - 1 + near, None, None]  # c(K), (H, 1, 1)
    after = weights[:, n - 1 - near, None, None]  # c(-K)
    earlier = nn.functional.pad(x.cumsum(dim=-1), (near, 0))[..., :n]  # sum_{j <= i - K} x_j
    later = nn.functional.pad(x.flip(-1).cumsum(dim=-1).flip(-1), (0, near))[..., near:]  # sum_{j >= i + K} x_j
    return local + before * earlier + after * later


def fft_rpe_attention(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, weights: Tensor, max_distance: int, mask: Tensor | None
) -> Tensor:
    """The same outputs as `naive_rpe_attention`, through `toeplitz_product` over the M (D + 1) entries of S, the
    sequence last (where the transforms read it contiguously), a group of features at a time: the transforms hold
    about 3 N (D + 1) values per feature and sequence, GROUP_VALUES at most per group (a 16k-token prefill held
    gigabytes at once)."""
    b, h, n, m = phi_k.shape
    values = real_rows(torch.cat([v, torch.ones_like(v[..., :1])], dim=-1), mask).transpose(-2, -1)  # (B, H, E, N)
    group = max(1, min(m, GROUP_VALUES // (b * h * values.shape[2] * 3 * n)))
    out = 0.0
    for first in range(0, m, group):
        features = phi_k[..., first : first + group].transpose(-2, -1)  # (B, H, g, N)
        outer = (features[:, :, :, None] * values[:, :, None]).reshape(b, h, -1, n)  # phi(k_j) [v_j, 1]^T
        states = toeplitz_product(outer, weights, max_distance).view(b, h, features.shape[2], -1, n)
        out = out + torch.einsum("bhng,bhgen->bhne", phi_q[..., first : first + group], states)  # (B, H, N, D + 1)
    total = out[..., -1:]
    return out[..., :-1] / torch.where(total > 0, total, 1.0)
