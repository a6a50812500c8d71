"""Nystromformer (Xiong et al. 2021): softmax attention through segment-mean landmarks and a Nystrom pinv.

out = softmax(Q K~^T) pinv(softmax(Q~ K~^T)) softmax(Q~ K^T) V (+ depthwise conv of V), with Q~, K~ the
means of consecutive segments of the real tokens. Segments split each sequence's real length as evenly as
possible (any length, any padding); with at least as many landmarks as real tokens, every token is its own
landmark and the result is exact softmax attention (up to the iterative pinv).
"""
from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from baselines.random_features import seeded_generator
from harness.options import option, require
from harness.registry import AttentionConfig, register_attention


def iterative_pinv(a: Tensor, iterations: int = 6) -> Tensor:
    """Newton-Schulz-type pseudo-inverse (the reference's 3rd-order scheme): (..., L, L) -> (..., L, L).

    Initial Z = A^T / (max row sum * max column sum), computed for each matrix separately.
    """
    magnitude = a.abs()
    scale = magnitude.sum(-1).amax(-1) * magnitude.sum(-2).amax(-1)  # (...,) per matrix
    z = a.transpose(-2, -1) / scale[..., None, None]
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


def segment_means(x: Tensor, segment: Tensor, weights: Tensor, num_segments: int) -> Tensor:
    """Means of x over positions with the same segment id, padding weighted 0: (B, H, N, d) -> (B, H, L, d).

    segment: (B, N) long in [0, L); weights: (B, N) 1 for real tokens, 0 for padding. Empty segments are 0.
    """
    b, h, n, d = x.shape
    count = torch.zeros(b, num_segments, dtype=x.dtype, device=x.device).scatter_add_(1, segment, weights)
    sums = torch.zeros(b, h, num_segments, d, dtype=x.dtype, device=x.device)
    sums.scatter_add_(2, segment[:, None, :, None].expand(b, h, n, d), x * weights[:, None, :, None])
    return sums / count.clamp_min(1)[:, None, :, None]


def landmark_segments(mask: Tensor, num_landmarks: int) -> tuple[Tensor, Tensor]:
    """Segment id of every position (B, N) and which landmarks have tokens (B, L), from a (B, N) real-token mask.

    The r-th real token of a sequence with n real tokens goes to segment floor(r L / n): consecutive
    segments whose sizes differ by at most one; padding goes to segment 0 with weight 0.
    """
    lengths = mask.sum(dim=1, keepdim=True)
    rank = mask.long().cumsum(dim=1) - 1
    segment = torch.where(mask, rank * num_landmarks // lengths.clamp_min(1), 0)
    count = torch.zeros(mask.shape[0], num_landmarks, dtype=torch.long, device=mask.device)
    count.scatter_add_(1, segment, mask.long())
    return segment, count > 0


def _masked_softmax(scores: Tensor, keep: Tensor) -> Tensor:
    """Softmax over the last axis where `keep` is True (finite fill, so fully masked rows stay finite)."""
    return torch.softmax(scores.masked_fill(~keep, torch.finfo(scores.dtype).min), dim=-1)


@dataclasses.dataclass
class NystromConfig(AttentionConfig):
    num_landmarks: int = option(64, "landmarks (segment means) per sequence")
    pinv_iterations: int = option(6, "iterations of the iterative pseudo-inverse (reference: 6)")
    conv_kernel: int = option(33, "depthwise convolution over V along the sequence as a skip (odd size; 0 = none)")

    def __post_init__(self) -> None:
        require(self.num_landmarks >= 1, f"num_landmarks={self.num_landmarks} must be at least 1")
        require(self.pinv_iterations >= 1, f"pinv_iterations={self.pinv_iterations} must be at least 1")
        require(self.conv_kernel == 0 or self.conv_kernel % 2 == 1,
                f"conv_kernel={self.conv_kernel} must be odd (centred) or 0 for no convolution")
        require(not self.causal, "attention 'nystromformer' has no causal form (causal=True given); "
                                 "use 'softmax', 'performer' or 'elu-linear' for causal attention")


@register_attention("nystromformer", config=NystromConfig)
class NystromAttention(nn.Module):
    """Nystrom approximation of softmax attention with segment-mean landmarks, O(n L) time and memory."""

    def __init__(self, cfg: NystromConfig):
        super().__init__()
        self.cfg = cfg
        self.conv = None
        if cfg.conv_kernel:
            self.conv = nn.Conv2d(cfg.num_heads, cfg.num_heads, (cfg.conv_kernel, 1), padding=(cfg.conv_kernel // 2, 0),
                                  groups=cfg.num_heads, bias=False)
            bound = cfg.conv_kernel ** -0.5  # torch's default for this fan-in, drawn from the seed
            with torch.no_grad():
                self.conv.weight.uniform_(-bound, bound, generator=seeded_generator(cfg.seed))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, h, n, d = q.shape
        mask = torch.ones(b, n, dtype=torch.bool, device=q.device) if key_padding_mask is None else key_padding_mask
        num_landmarks = min(self.cfg.num_landmarks, n)  # more landmarks than positions would stay empty
        q, k = q * d ** -0.25, k * d ** -0.25
        segment, valid = landmark_segments(mask, num_landmarks)
        weights = mask.to(q.dtype)
        q_land = segment_means(q, segment, weights, num_landmarks)
        k_land = segment_means(k, segment, weights, num_landmarks)
        kernel_1 = _masked_softmax(q @ k_land.transpose(-2, -1), valid[:, None, None, :])  # (B, H, N, L)
        kernel_2 = _masked_softmax(q_land @ k_land.transpose(-2, -1), valid[:, None, None, :])  # (B, H, L, L)
        empty = ~(valid[:, None, :, None] & valid[:, None, None, :])
        kernel_2 = torch.where(empty, torch.eye(num_landmarks, dtype=q.dtype, device=q.device), kernel_2)
        kernel_3 = _masked_softmax(q_land @ k.transpose(-2, -1), mask[:, None, None, :])  # (B, H, L, N)
        precise = torch.promote_types(q.dtype, torch.float32)  # the iteration diverges in half precision
        pinv = iterative_pinv(kernel_2.to(precise), self.cfg.pinv_iterations).to(q.dtype)
        out = kernel_1 @ (pinv @ (kernel_3 @ v))
        if self.conv is not None:
            out = out + self.conv(v * weights[:, None, :, None])
        return out
