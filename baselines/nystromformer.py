"""Nystromformer (Xiong et al. 2021): softmax attention through segment-mean landmarks and a Nystrom pinv.

out = softmax(Q K~^T) pinv(softmax(Q~ K~^T)) softmax(Q~ K^T) V (+ depthwise conv of V), with Q~, K~ the
means of consecutive segments of the real tokens. Segments split each sequence's real length as evenly as
possible (any length, any padding); with at least as many landmarks as real tokens, every token is its own
landmark and the result is exact softmax attention (up to the iterative pinv).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import torch
from torch import Tensor, nn

from attnbench.baselines.random_projections import seeded_generator
from attnbench.kernels import native
from attnbench.kernels.cpu_threads import chunk_rows, run_on_threads, scratch, split_rows, torch_threads
from attnbench.kernels.masks import key_padding_mask as padding_mask
from attnbench.kernels.routes import RecordsRoutes
from attnbench.options import option, require
from attnbench.registry import AttentionConfig, check_heads, register_attention

CONV_BLOCK = 16  # outputs per Toeplitz block of the sequence convolution


def iterative_pinv(a: Tensor, iterations: int = 6, threads: int = 0) -> Tensor:
    """Newton-Schulz-type pseudo-inverse (the reference's 3rd-order scheme): (..., L, L) -> (..., L, L).

    Initial Z = A^T / (max row sum * max column sum), computed for each matrix separately. threads > 0: the steps
    in one fused call (`native.PinvSteps`, float32 on CPU, L a multiple of 16; otherwise the torch loop), the same
    iterates and gradients to rounding without some thirty small operations each way.
    """
    magnitude = a.abs()
    scale = magnitude.sum(-1).amax(-1) * magnitude.sum(-2).amax(-1)  # (...,) per matrix
    z = a.transpose(-2, -1) / scale[..., None, None]
    if (
        threads
        and a.dtype == torch.float32
        and a.device.type == "cpu"
        and a.shape[-1] % 16 == 0
        and native.library() is not None
    ):
        return native.PinvSteps.apply(a, z, iterations, threads)
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


def _masked_softmax(scores: Tensor, keep: Tensor | None) -> Tensor:
    """Softmax over the last axis where `keep` is True (finite fill, so fully masked rows stay finite)."""
    if keep is not None:
        scores = scores.masked_fill_(~keep, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


def _landmark_attention(q_land: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, rows: int) -> Tensor:
    """softmax(q_land k^T) v over blocks of keys with a running maximum (as flash attention), without an (L, N)
    matrix: q_land (B, H, L, d) already scaled, k, v (B, H, N, d) -> (B, H, L, D). Masked keys are filled with
    the dtype's minimum (a landmark without any real key averages all positions, as `_masked_softmax`).
    One range of blocks per CPU thread, merged at the end."""

    def partial(first: int, stop: int) -> list[Tensor]:
        acc = total = running = None
        for start in range(first, stop, rows):
            block = slice(start, min(start + rows, stop))
            scores = q_land @ k[:, :, block].transpose(-2, -1)  # (B, H, L, C)
            if key_padding_mask is not None:
                scores.masked_fill_(~key_padding_mask[:, None, None, block], torch.finfo(scores.dtype).min)
            top = scores.amax(dim=-1, keepdim=True)
            weights = scores.sub_(top).exp_()
            acc, total, running = _merge_softmax_sums(
                [acc, total, running], [weights @ v[:, :, block], weights.sum(-1, keepdim=True), top]
            )
        return [acc, total, running]

    parts = run_on_threads(partial, split_rows(k.shape[2], rows, k.device))
    acc, total, _ = functools.reduce(_merge_softmax_sums, parts)
    return acc / total


def _merge_softmax_sums(a: list, b: list) -> list:
    """[sum of weights v, sum of weights, max] of two ranges (weights relative to each max) -> the same for both."""
    if a[0] is None:
        return b
    top = torch.maximum(a[2], b[2])
    fa, fb = torch.exp(a[2] - top), torch.exp(b[2] - top)
    return [a[0] * fa + b[0] * fb, a[1] * fa + b[1] * fb, top]


def _query_attention(q: Tensor, k_land: Tensor, values: Tensor, keep: Tensor | None, rows: int) -> Tensor:
    """softmax(q k_land^T) @ values over blocks of queries: q (B, H, N, d), k_land (B, H, L, d) already scaled,
    values (B, H, L, D), keep (B, 1, 1, L) or None -> (B, H, N, D). One range of blocks per CPU thread."""
    b, h, n, _ = q.shape
    out = q.new_empty(b, h, n, values.shape[-1])

    def fill(first: int, stop: int) -> None:
        for start in range(first, stop, rows):
            block = slice(start, min(start + rows, stop))
            weights = _masked_softmax(q[:, :, block] @ k_land.transpose(-2, -1), keep)
            torch.matmul(weights, values, out=out[:, :, block])

    run_on_threads(fill, split_rows(n, rows, q.device))
    return out


def sequence_conv(v: Tensor, weight: Tensor, block: int = CONV_BLOCK, out: Tensor | None = None) -> Tensor:
    """Depthwise convolution along the sequence, zero-padded and centred, as nn.Conv2d(H, H, (K, 1), groups=H)
    computes it: v (B, H, N, D), weight (H, K) -> (B, H, N, D); with `out` (no gradients), added into it.

    Rendered as one batched matrix product per sequence and head: each block of `block` outputs is a banded
    (block, block + K - 1) Toeplitz matrix times the window of the zero-padded sequence it reads (overlapping
    windows as a strided view, no copies). Several times faster on CPU than the convolution routine here;
    accumulating into `out` block by block saves the stacked result and the separate sum. Differentiable
    through `_SequenceConv`'s backward (autograd through the strided windows scattered the gradient element by
    element and zero-filled a full copy per sequence and head: most of a training step's time).
    """
    if out is None and torch.is_grad_enabled() and (v.requires_grad or weight.requires_grad):
        return _SequenceConv.apply(v, weight, block)
    with torch.no_grad():
        return _conv(v, weight, block, out)


def _conv(v: Tensor, weight: Tensor, block: int, out: Tensor | None = None) -> Tensor:
    """The convolution without autograd: by the fused CPU kernel where it takes the tensors (a row's taps summed in
    registers; at 1024 tokens a tenth of the banded products' time, whose band, padding and stacking were most of
    it), else `_banded_conv`."""
    if native.takes(v, weight, value_width=v.shape[-1]):
        conv = native.sequence_conv(v.contiguous(), weight.contiguous(), torch.get_num_threads())
        return conv if out is None else out.add_(conv)
    return _banded_conv(v, weight, block, out)


class _SequenceConv(torch.autograd.Function):
    """`sequence_conv` with its backward: for v the transposed convolution (the taps reversed), for the weight
    per-tap sums of g_i . v_{i+t-K/2}; by the fused kernels where they take the tensors, else in the same banded
    products (`conv_weight_grad`)."""

    @staticmethod
    def forward(ctx, v: Tensor, weight: Tensor, block: int) -> Tensor:
        ctx.save_for_backward(v, weight)
        ctx.block = block
        return _conv(v, weight, block)

    @staticmethod
    def backward(ctx, g: Tensor):
        v, weight = ctx.saved_tensors
        g = g.contiguous()
        dv = _conv(g, weight.flip(-1), ctx.block) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1] and native.takes(g, v, value_width=v.shape[-1]):
            dw = native.sequence_conv_weight_grad(g, v.contiguous(), weight.shape[-1], torch.get_num_threads())
        elif ctx.needs_input_grad[1]:
            dw = conv_weight_grad(g, v, weight.shape[-1], ctx.block)
        return dv, dw, None


def conv_weight_grad(g: Tensor, v: Tensor, size: int, block: int = CONV_BLOCK) -> Tensor:
    """d/dweight of sum(g * sequence_conv(v, weight)): dw[h, t] = sum over batch, i and channels of
    g[b, h, i] . v[b, h, i + t - size // 2] (zero outside): (H, size). Per block of outputs, g_block windows^T is a
    (block, block + size - 1) matrix whose t-th diagonal holds tap t's share."""
    b, h, n, d = v.shape
    blocks = -(-n // block)
    width = block + size - 1
    padded = nn.functional.pad(v, (0, 0, size // 2, size - 1 - size // 2 + blocks * block - n))
    g_blocks = nn.functional.pad(g, (0, 0, 0, blocks * block - n))
    dw = v.new_zeros(h, size)
    for i in range(b):
        for head in range(h):
            sequence = padded[i, head]
            windows = sequence.as_strided((blocks, width, d), (block * sequence.stride(0), sequence.stride(0), 1))
            band = torch.bmm(g_blocks[i, head].view(blocks, block, d), windows.transpose(1, 2)).sum(dim=0)
            dw[head] += band.as_strided((block, size), (width + 1, 1)).sum(dim=0)  # band[r, r + t] summed over r
    return dw


def _banded_conv(v: Tensor, weight: Tensor, block: int, out: Tensor | None = None) -> Tensor:
    """`sequence_conv` itself (no autograd of its own)."""
    b, h, n, d = v.shape
    size = weight.shape[-1]
    blocks = -(-n // block)
    width = block + size - 1
    margins = (size // 2, size - 1 - size // 2 + blocks * block - n)
    columns = torch.arange(block, device=v.device)[:, None] + torch.arange(size, device=v.device)
    band = torch.zeros(h, block, width, dtype=v.dtype, device=v.device)
    band = band.scatter(2, columns.expand(h, block, size), weight.to(v.dtype)[:, None, :].expand(h, block, size))
    if out is None:
        padded = nn.functional.pad(v, (0, 0, *margins))
    else:  # only the margins need zeros; a reused buffer, so no fresh pages to fault in
        padded = scratch((b, h, n + sum(margins), d), v.dtype, v.device, slot=2)
        padded[:, :, : margins[0]].zero_()
        padded[:, :, margins[0] + n :].zero_()
        padded[:, :, margins[0] : margins[0] + n].copy_(v)
    direct = out is not None and blocks * block == n
    result = out if direct else None if out is None else v.new_empty(b, h, blocks * block, d)
    rows = []
    for i in range(b):
        for head in range(h):
            sequence = padded[i, head]
            windows = sequence.as_strided((blocks, width, d), (block * sequence.stride(0), sequence.stride(0), 1))
            toeplitz = band[head].expand(blocks, block, width)
            if direct:
                result[i, head].view(blocks, block, d).baddbmm_(toeplitz, windows)
            elif result is not None:
                torch.bmm(toeplitz, windows, out=result[i, head].view(blocks, block, d))
            else:
                rows.append(torch.bmm(toeplitz, windows))
    if out is not None:
        return out if direct else out.add_(result[:, :, :n])
    conv = torch.stack(rows).view(b, h, blocks * block, d)
    return conv if blocks * block == n else conv[:, :, :n]


def even_segment_means(x: Tensor, num_segments: int) -> Tensor | None:
    """Means of num_segments equal consecutive segments of x (B, H, N, d) -> (B, H, L, d); None if L does not divide N."""
    b, h, n, d = x.shape
    if n % num_segments:
        return None
    return x.view(b, h, num_segments, n // num_segments, d).mean(dim=3)


@dataclasses.dataclass
class NystromConfig(AttentionConfig):
    num_landmarks: int = option(64, "landmarks (segment means) per sequence", maximum=65536)
    pinv_iterations: int = option(6, "iterations of the iterative pseudo-inverse (reference: 6)")
    conv_kernel: int = option(33, "depthwise convolution over V along the sequence as a skip (odd size; 0 = none)")

    def __post_init__(self) -> None:
        require(self.num_landmarks >= 1, f"num_landmarks={self.num_landmarks} must be at least 1")
        require(self.pinv_iterations >= 1, f"pinv_iterations={self.pinv_iterations} must be at least 1")
        require(
            self.conv_kernel == 0 or self.conv_kernel % 2 == 1,
            f"conv_kernel={self.conv_kernel} must be odd (centred) or 0 for no convolution",
        )
        require(
            not self.causal,
            "the Nystromformer has no causal form (causal=True given); "
            "use 'softmax', 'performer' or 'elu-linear' for causal attention",
        )


@register_attention("nystromformer", config=NystromConfig)
class NystromAttention(RecordsRoutes, nn.Module):
    """Nystrom approximation of softmax attention with segment-mean landmarks, O(n L) time and memory."""

    def __init__(self, cfg: NystromConfig):
        super().__init__()
        self.cfg = cfg
        self.conv = None
        if cfg.conv_kernel:
            self.conv = nn.Conv2d(
                cfg.num_heads,
                cfg.num_heads,
                (cfg.conv_kernel, 1),
                padding=(cfg.conv_kernel // 2, 0),
                groups=cfg.num_heads,
                bias=False,
            )
            bound = cfg.conv_kernel**-0.5  # torch's default for this fan-in, drawn from the seed
            with torch.no_grad():
                self.conv.weight.uniform_(-bound, bound, generator=seeded_generator(cfg.seed))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        key_padding_mask = padding_mask(key_padding_mask, k)
        b, h, n, d = q.shape
        num_landmarks = min(self.cfg.num_landmarks, n)  # more landmarks than positions would stay empty
        route = self.choose_route(q, k, v, key_padding_mask, num_landmarks)
        fused = route == "native"
        threads = torch.get_num_threads()
        with torch_threads(1) if fused else contextlib.nullcontext():  # small operations; see `torch_threads`
            q_land, k_land, valid, real = self._landmarks(
                q, k, key_padding_mask, num_landmarks, threads if fused else 0
            )
            k_land = k_land * d**-0.5  # the scores' 1/sqrt(d), folded into the small landmark matrices
            keep = None if valid is None else valid[:, None, None, :]
            kernel_2 = _masked_softmax(q_land @ k_land.transpose(-2, -1), keep)  # (B, H, L, L)
            if valid is not None:
                empty = ~(valid[:, None, :, None] & valid[:, None, None, :])
                kernel_2 = torch.where(empty, torch.eye(num_landmarks, dtype=q.dtype, device=q.device), kernel_2)
            precise = torch.promote_types(q.dtype, torch.float32)  # the iteration diverges in half precision
            pinv = iterative_pinv(kernel_2.to(precise), self.cfg.pinv_iterations, threads).to(q.dtype)
            route = self.choose_route(q, k, v, key_padding_mask, num_landmarks, valid is None or bool(valid.all()))
            self._took(route)
            if route == "native":
                return self._fused_forward(q, k, v, key_padding_mask, q_land * d**-0.5, k_land, pinv, real, threads)
        if route == "native-training":  # fused with their backward: no (N, L) matrix
            values = native.LandmarkValues.apply(
                k.contiguous(), v.contiguous(), q_land * d**-0.5, native.real_rows(key_padding_mask), threads
            )
            out = native.LandmarkQueries.apply(q.contiguous(), k_land, pinv @ values, threads)
        elif route == "pytorch":
            keys = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
            kernel_3 = _masked_softmax((q_land * d**-0.5) @ k.transpose(-2, -1), keys)  # (B, H, L, N)
            kernel_1 = _masked_softmax(q @ k_land.transpose(-2, -1), keep)  # (B, H, N, L)
            out = kernel_1 @ (pinv @ (kernel_3 @ v))
        else:  # the same products block by block, the (N, L) score blocks kept in cache
            rows = chunk_rows(q, num_landmarks)
            landmark_values = _landmark_attention(q_land * d**-0.5, k, v, key_padding_mask, rows)
            out = _query_attention(q, k_land, pinv @ landmark_values, keep, rows)
        if self.conv is not None:
            skip = (v if real is None else v * real, self.conv_weight(h))
            out = out + sequence_conv(*skip) if torch.is_grad_enabled() else sequence_conv(*skip, out=out)
        return out

    def conv_weight(self, heads: int) -> Tensor:
        """The convolution's taps for a call on `heads` heads, (heads, K): its own per head, or one head's shared."""
        check_heads("nystromformer", self.cfg.num_heads, heads)
        return self.conv.weight[:, 0, :, 0].expand(heads, -1)

    @staticmethod
    def choose_route(
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        num_landmarks: int,
        every_landmark: bool = True,
    ) -> str:
        """The one route chooser: "native" (gradients off) or "native-training" (on, d == Dv) where the fused CPU
        kernels take the call (float32 on CPU, widths they take, L a multiple of 16, every sequence with a real key
        and, once the landmarks are known, every landmark with tokens: the PyTorch path defines the degenerate
        cases); else "pytorch-chunked" (gradients off: block by block) or "pytorch" (autograd, (N, L) matrices)."""
        grads = torch.is_grad_enabled()
        fusable = (
            every_landmark
            and num_landmarks % 16 == 0
            and (key_padding_mask is None or bool(key_padding_mask.any(dim=1).all()))
            and (not grads or q.shape[-1] == v.shape[-1])
        )
        if fusable and native.takes(q, k, v, value_width=v.shape[-1]):
            return "native-training" if grads else "native"
        return "pytorch" if grads else "pytorch-chunked"

    def _fused_forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_padding_mask: Tensor | None,
        q_land: Tensor,
        k_land: Tensor,
        pinv: Tensor,
        real: Tensor | None,
        threads: int,
    ) -> Tensor:
        """The inference forward through the fused kernels on `threads` threads: softmax(q_land k^T) v by
        column-stabilised sums (merged across threads as `_landmark_attention`'s), then per block of queries
        softmax(q k_land^T) (pinv that) and the convolution over V, each output row written once."""
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        values, *_ = native.landmark_values(k, v, q_land, native.real_rows(key_padding_mask), threads)
        conv = None
        if self.conv is not None:
            conv = ((v if real is None else v * real).contiguous(), self.conv_weight(q.shape[1]).contiguous())
        return native.landmark_queries(q, k_land, pinv @ values.view(*q_land.shape[:3], -1), threads, conv)[0]

    def _landmarks(
        self, q: Tensor, k: Tensor, key_padding_mask: Tensor | None, num_landmarks: int, threads: int = 0
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """Segment means of q and k (B, H, L, d), which landmarks have tokens (B, L) and the real-token
        weights (B, 1, N, 1); without padding and with L dividing N: plain reshaped means, both None
        (`threads` > 0: the fused path's, computed by the fused kernels on that many threads)."""
        if key_padding_mask is None and q.shape[2] % num_landmarks == 0:
            if threads and q.shape[-1] % 16 == 0:
                return (*native.segment_means(q.contiguous(), k.contiguous(), num_landmarks, threads), None, None)
            return even_segment_means(q, num_landmarks), even_segment_means(k, num_landmarks), None, None
        b, n = q.shape[0], q.shape[2]
        mask = torch.ones(b, n, dtype=torch.bool, device=q.device) if key_padding_mask is None else key_padding_mask
        segment, valid = landmark_segments(mask, num_landmarks)
        weights = mask.to(q.dtype)
        q_land = segment_means(q, segment, weights, num_landmarks)
        k_land = segment_means(k, segment, weights, num_landmarks)
        return q_land, k_land, valid, weights[:, None, :, None]

    def cost(self, batch: int, heads: int, n: int, d: int) -> dict[str, float]:
        """FLOPs and minimum bytes (float32) of one forward without padding (`nystrom_cost`)."""
        kernel = self.cfg.conv_kernel if self.conv is not None else 0
        return nystrom_cost(batch, heads, n, d, min(self.cfg.num_landmarks, n), self.cfg.pinv_iterations, kernel)


def nystrom_cost(
    batch: int, heads: int, n: int, d: int, landmarks: int, iterations: int, conv_kernel: int
) -> dict[str, float]:
    """FLOPs and minimum bytes (float32) of Nystrom attention with L landmarks, without padding.

    Segment means (2 n d), the three score products (2 n L d, 2 L^2 d, 2 L n d) and their softmaxes
    (about 5 operations per score: max, subtract, exp, sum, divide), the pinv (per iteration 4 L x L
    products plus 3 scaled identities), kernel_3 @ v (2 L n d), pinv @ that (2 L^2 d), kernel_1 @ that
    (2 n L d), the convolution (2 K n d) and the sum (n d). Bytes: q, k, v read, out written.
    """
    m = landmarks
    means = 2.0 * n * d
    scores = 2.0 * n * m * d * 2 + 2.0 * m * m * d + 5.0 * (2 * n * m + m * m)
    pinv = iterations * (4 * 2.0 * m**3 + 3.0 * m * m)
    products = 2.0 * m * n * d + 2.0 * m * m * d + 2.0 * n * m * d
    conv = 2.0 * conv_kernel * n * d + n * d if conv_kernel else 0.0
    return {
        "flops": batch * heads * (means + scores + pinv + products + conv),
        "bytes": 4.0 * batch * heads * n * d * 4,
    }
