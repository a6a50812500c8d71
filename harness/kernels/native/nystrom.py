"""Nystromformer's passes on the same kernels: `softmax_columns` and `segment_means`, the landmark passes
(`landmark_values`, `landmark_queries`; the Functions `LandmarkValues`, `LandmarkQueries` in training),
`PinvSteps` for the iterative pseudo-inverse and `sequence_conv` (with its weight gradient) for the skip over V.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.kernels.native import runtime
from attnbench.kernels.native.linear import write_queries
from attnbench.kernels.native.runtime import ptr
from attnbench.kernels.native.shapes import (
    NativeShapeError,
    expect,
    expect_conv,
    expect_landmarks,
    expect_projection,
    expect_rows,
    expect_size,
    expect_threads,
)
from attnbench.kernels.native.spec import NativeSpec


def softmax_columns(k: Tensor, weights: Tensor, v: Tensor, real: Tensor | None, threads: int = 1) -> list[Tensor]:
    """Over the rows of k, v (B, H, N, .), contiguous float32, on `threads` threads: for each column l of u = k w
    (weights (B*H, d, L)), [sum_j e_jl v_j (B*H, L, Dv), sum_j e_jl (B*H, L, 1), max_l (B*H, L, 1)] with
    e_jl = exp(u_jl - max_l) and max_l the column's maximum over real rows (`real` (B, N) uint8 or None):
    softmax(w^T k^T) v = first / second."""
    b, h, n, d = expect_rows("softmax_columns", k, ("v", v, v.shape[-1]))
    m, _ = expect_projection("softmax_columns", weights, d, b * h, h)
    expect("softmax_columns", "the key mask", real, (b, n), torch.uint8, optional=True)
    expect_threads("softmax_columns", threads)
    dv = v.shape[-1]
    acc, total, top = torch.empty(b * h, m, dv), torch.empty(b * h, m, 1), torch.empty(b * h, m, 1)
    runtime.call(
        "attnbench_softmax_columns",
        k.data_ptr(),
        v.data_ptr(),
        ptr(real),
        b * h,
        h,
        n,
        d,
        dv,
        m,
        weights.data_ptr(),
        weights.shape[0],
        threads,
        acc.data_ptr(),
        total.data_ptr(),
        top.data_ptr(),
    )
    return [acc, total, top]


def segment_means(q: Tensor, k: Tensor, segments: int, threads: int = 1) -> tuple[Tensor, Tensor]:
    """Means of `segments` equal consecutive segments of q and k (B, H, N, d), contiguous float32, N a multiple of
    segments and d of 16 -> two (B, H, segments, d), in one pass on `threads` threads."""
    b, h, n, d = expect_rows("segment_means", q, ("k", k, None))
    expect_size("segment_means", "segments", segments)
    if n % segments:
        raise NativeShapeError(f"native.segment_means: {segments} segments do not divide the length {n}")
    expect_threads("segment_means", threads)
    q_means, k_means = torch.empty(b, h, segments, d), torch.empty(b, h, segments, d)
    runtime.library().attnbench_segment_means(
        q.data_ptr(), k.data_ptr(), b * h, n, d, segments, threads, q_means.data_ptr(), k_means.data_ptr()
    )
    return q_means, k_means


def sequence_conv(v: Tensor, weight: Tensor, threads: int = 1) -> Tensor:
    """The depthwise convolution along the sequence, zero-padded and centred, as nn.Conv2d(H, H, (K, 1), groups=H):
    v (B, H, N, Dv) contiguous float32, Dv in VALUE_WIDTHS; weight (H, K) contiguous float32 -> (B, H, N, Dv)."""
    b, h, n, dv = expect_conv("sequence_conv", v, weight.shape[-1] if weight.dim() == 2 else -1, threads)
    expect("sequence_conv", "the weight", weight, (h, weight.shape[-1] if weight.dim() == 2 else -1))
    out = torch.empty_like(v)
    runtime.call(
        "attnbench_sequence_conv",
        v.data_ptr(),
        weight.data_ptr(),
        b * h,
        h,
        n,
        dv,
        weight.shape[-1],
        threads,
        out.data_ptr(),
    )
    return out


def sequence_conv_weight_grad(g: Tensor, v: Tensor, size: int, threads: int = 1) -> Tensor:
    """d/dweight of sum(g * sequence_conv(v, weight)) for weight (H, size): g, v (B, H, N, Dv) contiguous float32
    -> (H, size), each tap's sum over the rows in order, then over the batch."""
    b, h, n, dv = expect_conv("sequence_conv_weight_grad", v, size, threads)
    expect("sequence_conv_weight_grad", "the output gradient", g, (b, h, n, dv))
    dw = torch.empty(b, h, size)
    runtime.call(
        "attnbench_sequence_conv_weight_grad", g.data_ptr(), v.data_ptr(), b * h, n, dv, size, threads, dw.data_ptr()
    )
    return dw.sum(dim=0)


class PinvSteps(torch.autograd.Function):
    """(a, z0) -> the iterative pseudo-inverse's `iterations` steps from z0 (the start stays a torch operation,
    so its max-based scale takes autograd's gradient), a (..., L, L) float32 with L a multiple of 16; the backward
    goes through the steps in reverse from what the forward stored of each (its input and its three products:
    STEP_PARTS matrices, recomputed they had taken a fifth of the backward), only when a gradient is wanted."""

    STEP_PARTS = 5

    @staticmethod
    def forward(ctx, a: Tensor, z0: Tensor, iterations: int, threads: int):
        size = a.shape[-1]
        if a.dim() < 2 or a.shape[-2] != size:
            raise NativeShapeError(f"native.PinvSteps: a must be (..., L, L); got {tuple(a.shape)}")
        expect_size("PinvSteps", "L", size, multiple=16)
        expect_size("PinvSteps", "iterations", iterations)
        expect_threads("PinvSteps", threads)
        heads = a.numel() // (size * size)
        a, z = a.contiguous(), z0.contiguous().clone()
        expect("PinvSteps", "a", a, tuple(a.shape))
        expect("PinvSteps", "z0", z, tuple(a.shape))
        store = torch.empty(heads, iterations, PinvSteps.STEP_PARTS, size, size) if any(ctx.needs_input_grad) else None
        runtime.library().attnbench_pinv(a.data_ptr(), heads, size, iterations, threads, z.data_ptr(), ptr(store))
        ctx.save_for_backward(a, store)
        ctx.iterations, ctx.threads = iterations, threads
        return z

    @staticmethod
    def backward(ctx, g: Tensor):
        a, store = ctx.saved_tensors
        size = a.shape[-1]
        g = g.contiguous()
        expect("PinvSteps.backward", "the output gradient", g, tuple(a.shape))
        da, dz0 = torch.empty_like(a), torch.empty_like(a)
        runtime.library().attnbench_pinv_backward(
            a.data_ptr(),
            store.data_ptr(),
            g.data_ptr(),
            a.numel() // (size * size),
            size,
            ctx.iterations,
            ctx.threads,
            da.data_ptr(),
            dz0.data_ptr(),
        )
        return da, dz0, None, None


# Nystromformer's landmark passes: `landmark_values` and `landmark_queries` in inference, the same in the forwards of
# the Functions `LandmarkValues` and `LandmarkQueries` in training

LANDMARK_EPS = 1e-6  # the query pass's guard (its sums are at least 1, so it never acts)


def _landmark_layout(land: Tensor) -> tuple[Tensor, Tensor]:
    """Landmarks (B, H, L, d) as the kernels take them: (B*H, L, d) and, as a projection, (B*H, d, L), contiguous."""
    b, h, size, d = land.shape
    rows = land.reshape(b * h, size, d).contiguous()
    return rows, rows.transpose(1, 2).contiguous()


def landmark_values(
    k: Tensor, v: Tensor, q_land: Tensor, real: Tensor | None, threads: int = 1
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """softmax(q_land k^T) v over the real keys by `softmax_columns` (no (L, N) matrix): k, v (B, H, N, d)
    contiguous float32, q_land (B, H, L, d) already scaled, `real` (B, N) uint8 or None (every sequence with a real
    key) -> the values (B*H, L, Dv), q_land laid out (`_landmark_layout`) and each column's max + log of its total
    (B*H, L), from which the backward recomputes the softmax weights."""
    expect_landmarks("landmark_values", k, q_land, "q_land")
    wt, w = _landmark_layout(q_land)
    acc, total, top = softmax_columns(k, w, v, real, threads)
    return acc / total, wt, w, (top + total.log()).squeeze(-1)


def landmark_queries(
    q: Tensor, k_land: Tensor, mixed: Tensor, threads: int = 1, conv: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """softmax(q k_land^T) mixed by `write_queries` (the favor features of q with k_land as the projection, sums all
    ones), plus `conv`'s convolution where given: q (B, H, N, d) contiguous float32, k_land (B, H, L, d) already
    scaled, mixed (B, H, L, Dv) -> the output (B, H, N, Dv), k_land laid out (`_landmark_layout`) and mixed as
    (B*H, L, Dv)."""
    b, h, n, _ = q.shape
    expect_landmarks("landmark_queries", q, k_land, "k_land")
    expect_landmarks("landmark_queries", q, mixed, "mixed", width=mixed.shape[-1], count=k_land.shape[2])
    wt, w = _landmark_layout(k_land)
    kv = mixed.reshape(b * h, wt.shape[1], -1).contiguous()
    out = torch.empty(b, h, n, kv.shape[-1])
    write_queries(
        NativeSpec("favor", w), q, kv, torch.ones(b * h, wt.shape[1], 1), None, LANDMARK_EPS, out, conv, threads
    )
    return out, wt, w, kv


class LandmarkValues(torch.autograd.Function):
    """`landmark_values` with gradients -> (B, H, L, d) (d == Dv): the backward recomputes each block's softmax
    weights from the columns' maxima and totals (attnbench_landmark_values_backward) and writes dk, dv (0 on
    padding) and the landmarks' gradient in one call."""

    @staticmethod
    def forward(ctx, k: Tensor, v: Tensor, q_land: Tensor, real: Tensor | None, threads: int):
        if k.shape[-1] != v.shape[-1]:
            raise NativeShapeError(f"native.LandmarkValues: needs d == Dv; got {k.shape[-1]} and {v.shape[-1]}")
        values, wt, w, offset = landmark_values(k, v, q_land, real, threads)
        ctx.save_for_backward(k, v, w, wt, offset, values)
        ctx.real, ctx.threads = real, threads
        return values.view(*q_land.shape[:3], -1)

    @staticmethod
    def backward(ctx, g: Tensor):
        k, v, w, wt, offset, values = ctx.saved_tensors
        b, h, n, d = k.shape
        expect("LandmarkValues.backward", "the output gradient", g.contiguous(), (b, h, values.shape[1], d))
        g = g.reshape(values.shape).contiguous()  # held: read through a raw pointer
        c = (g * values).sum(-1).contiguous()
        dk, dv, d_land = torch.empty_like(k), torch.empty_like(v), torch.empty_like(wt)
        runtime.call(
            "attnbench_landmark_values_backward",
            k.data_ptr(),
            v.data_ptr(),
            ptr(ctx.real),
            w.data_ptr(),
            wt.data_ptr(),
            offset.data_ptr(),
            g.data_ptr(),
            c.data_ptr(),
            b * h,
            h,
            n,
            d,
            wt.shape[1],
            ctx.threads,
            dk.data_ptr(),
            dv.data_ptr(),
            d_land.data_ptr(),
        )
        return dk, dv, d_land.view(b, h, -1, d), None, None


class LandmarkQueries(torch.autograd.Function):
    """`landmark_queries` (without the convolution) with gradients, d == Dv: the backward is
    attnbench_landmark_queries_backward: dq, and the gradients of k_land and mixed, in one call."""

    @staticmethod
    def forward(ctx, q: Tensor, k_land: Tensor, mixed: Tensor, threads: int):
        if q.shape[-1] != mixed.shape[-1]:
            raise NativeShapeError(f"native.LandmarkQueries: needs d == Dv; got {q.shape[-1]} and {mixed.shape[-1]}")
        out, wt, w, kv = landmark_queries(q, k_land, mixed, threads)
        ctx.save_for_backward(q, w, wt, kv, out)
        ctx.threads = threads
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        q, w, wt, kv, out = ctx.saved_tensors
        b, h, n, d = q.shape
        g = g.contiguous()  # held: read through a raw pointer
        expect("LandmarkQueries.backward", "the output gradient", g, tuple(out.shape))
        dq, d_mixed, d_land = torch.empty_like(q), torch.empty_like(kv), torch.empty_like(wt)
        runtime.call(
            "attnbench_landmark_queries_backward",
            q.data_ptr(),
            w.data_ptr(),
            wt.data_ptr(),
            kv.data_ptr(),
            out.data_ptr(),
            g.data_ptr(),
            b * h,
            n,
            d,
            wt.shape[1],
            ctx.threads,
            LANDMARK_EPS,
            dq.data_ptr(),
            d_mixed.data_ptr(),
            d_land.data_ptr(),
        )
        return dq, d_land.view(b, h, -1, d), d_mixed.view(b, h, -1, d), None
