"""The fused linear-attention passes: `attention` (key sums, the finished state, the query rows, in one call) for
inference, the autograd Function `Attention` for training, and `write_queries`, the query pass alone.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.kernels.native import runtime
from attnbench.kernels.native.abi import KINDS
from attnbench.kernels.native.runtime import pointers, ptr, supports
from attnbench.kernels.native.shapes import (
    NativeShapeError,
    expect,
    expect_call,
    expect_projection,
    expect_rows,
    expect_saved,
    expect_threads,
)
from attnbench.kernels.native.spec import NativeSpec


def attention(
    spec: NativeSpec,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    real: Tensor | None,
    eps: float,
    threads: int = 1,
    saved: list[Tensor | None] | None = None,
    skip_queries: bool = False,
) -> Tensor:
    """The whole non-causal attention in one call: the key sums, the state finished with the map's scale and
    offset, the query rows; q, k (B, H, N, d), v (B, H, N, Dv) contiguous, `real` (B, N) uint8 or None
    -> (B, H, N, Dv). `saved`: `Attention`'s buffers for the backward (training), or None. Key rows past each
    sequence's last real key are skipped (they contribute nothing); with `skip_queries` query rows there too,
    their outputs written as 0, for callers that never read them (`kernels.linear.fused.padded_queries_unread`)."""
    b, h, n, d = expect_call("attention", spec, q, k, v, real, threads)
    if saved is not None:
        expect_saved("attention", spec, saved, b * h, n, d, v.shape[-1])
    w = spec.weights
    out = torch.empty(b, h, n, v.shape[-1])
    runtime.call(
        "attnbench_attention",
        KINDS[spec.kind],
        q.data_ptr(),
        k.data_ptr(),
        v.data_ptr(),
        ptr(real),
        b * h,
        h,
        n,
        d,
        v.shape[-1],
        w.shape[-1] if w is not None else d,
        ptr(w),
        w.shape[0] if w is not None else 1,
        spec.norm_coef,
        int(spec.unit_eps is not None),
        spec.unit_eps or 0.0,
        spec.scale,
        spec.offset,
        eps,
        threads,
        out.data_ptr(),
        None if saved is None else pointers(saved),
        spec.floor,
        spec.bias,
        ptr(spec.phase),
        int(skip_queries),
    )
    return out


def write_queries(
    spec: NativeSpec,
    q: Tensor,
    kv: Tensor,
    ksum: Tensor,
    offsets: tuple[Tensor, Tensor] | None,
    eps: float,
    out: Tensor,
    conv: tuple[Tensor, Tensor] | None = None,
    threads: int = 1,
) -> None:
    """out = (phi_q kv + offset) / guard(phi_q ksum + offset, eps); kv (B*H, F, Dv), ksum
    (B*H, F, 1), offsets (B*H, 1, Dv) and (B*H, 1, 1) or None, all contiguous; out (B, H, N, Dv) contiguous.
    conv: (values (B, H, N, Dv), weight (H, K)), contiguous, whose centred depthwise convolution along the
    sequence is added (Nystromformer's skip), or None.
    Long: the shape checks of every argument, then the call with its 22 arguments in the C++ order."""
    kernel = "write_queries"
    if spec.kind not in ("favor", "elu", "trig"):  # attnbench_queries takes no paper map
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} is not one of favor, elu, trig")
    dv = out.shape[-1]
    b, h, n, d = expect_rows(kernel, q, ("out", out, dv))
    w = spec.weights
    if w is None and spec.kind != "elu":
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} needs a projection (weights)")
    expect_projection(kernel, w, d, b * h, h)
    f = spec.num_features if w is not None else d
    expect(kernel, "kv", kv, (b * h, f, dv))
    expect(kernel, "ksum", ksum, (b * h, f, 1))
    off_kv, off_den = (None, None) if offsets is None else (offsets[0].contiguous(), offsets[1].contiguous())
    expect(kernel, "the value offset", off_kv, (b * h, 1, dv), optional=offsets is None)
    expect(kernel, "the normaliser offset", off_den, (b * h, 1, 1), optional=offsets is None)
    conv_v, conv_w = (None, None) if conv is None else conv
    if conv is not None:
        expect(kernel, "the convolved values", conv_v, (b, h, n, dv))
        if conv_w.dim() != 2 or conv_w.shape[0] != h:
            raise NativeShapeError(
                f"native.{kernel}: the convolution weight must be ({h}, K) for {h} heads; got "
                f"{tuple(conv_w.shape)}: build the attention with num_heads={h}"
            )
        expect(kernel, "the convolution weight", conv_w, (h, conv_w.shape[1]))
    expect_threads(kernel, threads)
    runtime.call(
        "attnbench_queries",
        KINDS[spec.kind],
        q.data_ptr(),
        kv.data_ptr(),
        ksum.data_ptr(),
        ptr(off_kv),
        ptr(off_den),
        b * h,
        n,
        d,
        out.shape[-1],
        w.shape[-1] if w is not None else d,
        ptr(w),
        w.shape[0] if w is not None else 1,
        int(spec.unit_eps is not None),
        spec.unit_eps or 0.0,
        threads,
        eps,
        out.data_ptr(),
        ptr(conv_v),
        ptr(conv_w),
        0 if conv_w is None else conv_w.shape[-1],
        h,
    )


def supports_backward(spec: NativeSpec | None, q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether the fused path with gradients (`fused_linear_attention`) can run: the forward's conditions, no input
    normalising and d == Dv. A projection that takes gradients (Coulomb particles in phase A) gets them from the
    kernels' backward too (`Attention`'s weights input)."""
    return supports(spec, q, k, v) and spec.unit_eps is None and q.shape[-1] == v.shape[-1]


# the backward reads the features the forward kept, instead of recomputing them (a projection and an exp per
# element), where both tensors of them take at most this many bytes: 8 MiB at 1024 tokens and 32 MiB at 4096 with
# 4 heads of 256 features, where it saved 4-6% of a training step (A/B in one process). At 16384 (128 MiB) it saved
# nothing measurable, so longer sequences recompute them and keep the memory small
KEEP_FEATURES_BYTES = 64 << 20


class Attention(torch.autograd.Function):
    """(q, k, v, weights) -> `attention` with its fused backward (`attnbench_attention_backward`): the query pass's,
    the finished state's and the key pass's gradients in one call, dq, dk and dv each written once, and the
    projection's (spec.weights, passed again as `weights` so autograd sees it) where it takes one; the features
    kept from the forward where they fit in KEEP_FEATURES_BYTES, else recomputed block by block."""

    @staticmethod
    def forward(
        ctx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        weights: Tensor | None,
        spec: NativeSpec,
        real: Tensor | None,
        eps: float,
        threads: int,
        skip_queries: bool = False,
    ):
        b, h, n, _ = q.shape
        heads, f, dv = b * h, spec.num_features if spec.weights is not None else q.shape[-1], v.shape[-1]
        keep = 2 * heads * n * f * 4 <= KEEP_FEATURES_BYTES and spec.kind != "cos2"  # cos2's slope needs u
        # struct Saved's order: s_kv, s_ksum, off_kv, off_den, log_max; phi_q, phi_k, the keys' row maxima
        saved = [
            torch.empty(heads, f, dv),
            torch.empty(heads, f),
            torch.empty(heads, dv),
            torch.empty(heads),
            torch.empty(heads) if spec.kind == "favor" else None,
            torch.empty(heads, n, f) if keep else None,
            torch.empty(heads, n, f) if keep else None,
            torch.empty(heads, n) if keep else None,
        ]
        out = attention(spec, q, k, v, real, eps, threads, saved, skip_queries)
        ctx.spec, ctx.real, ctx.eps, ctx.threads, ctx.saved = spec, real, eps, threads, saved
        ctx.skip_queries = skip_queries
        ctx.save_for_backward(q, k, v, out)
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        q, k, v, out = ctx.saved_tensors
        spec, (b, h, n, d), w = ctx.spec, q.shape, ctx.spec.weights
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        g_wt = torch.empty(b * h, w.shape[-1], d) if w is not None and ctx.needs_input_grad[3] else None
        g = g.contiguous()  # held here: the kernel reads it through a raw pointer
        expect("Attention.backward", "the output gradient", g, tuple(out.shape))
        expect_saved("Attention.backward", spec, ctx.saved, b * h, n, d, v.shape[-1])
        runtime.call(
            "attnbench_attention_backward",
            KINDS[spec.kind],
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            ptr(ctx.real),
            b * h,
            h,
            n,
            d,
            v.shape[-1],
            w.shape[-1] if w is not None else d,
            ptr(w),
            w.shape[0] if w is not None else 1,
            spec.norm_coef,
            spec.scale,
            spec.offset,
            ctx.eps,
            ctx.threads,
            out.data_ptr(),
            g.data_ptr(),
            pointers(ctx.saved),
            dq.data_ptr(),
            dk.data_ptr(),
            dv.data_ptr(),
            spec.floor,
            spec.bias,
            ptr(spec.phase),
            int(ctx.skip_queries),
            ptr(g_wt),
        )
        return dq, dk, dv, None if g_wt is None else _projection_grad(g_wt, w.shape[0], h), None, None, None, None, None


def _projection_grad(g_wt: Tensor, heads_w: int, h: int) -> Tensor:
    """The kernels' per (batch, head) gradient of w^T (B*H, M, d) -> the projection's (heads_w, d, M): summed over
    the rows that share each projection (the batch, and the heads for one shared head's)."""
    bh, m, d = g_wt.shape
    if heads_w == bh:
        total = g_wt
    elif heads_w == h:
        total = g_wt.view(bh // h, h, m, d).sum(dim=0)
    else:
        total = g_wt.sum(dim=0, keepdim=True)
    return total.transpose(1, 2)
