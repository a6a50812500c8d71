"""The boundary: the kernels read and write through raw pointers with the sizes they are given, so every call checks
the tensors it passes (device, dtype, a dense row-major layout, exact shape) and the widths the kernels assume,
raising NativeShapeError (a ValueError) before anything runs: no Python call can make them read or write out of
bounds.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.kernels.native.abi import KINDS, PAPER_KINDS, VALUE_WIDTHS
from attnbench.kernels.native.spec import NativeSpec


class NativeShapeError(ValueError):
    """A call into the native kernels with a tensor or size they cannot take."""


def expect(
    kernel: str,
    name: str,
    t: Tensor | None,
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    optional: bool = False,
) -> None:
    """Raise unless t is a contiguous CPU tensor of `dtype` and exactly `shape` (None allowed when `optional`)."""
    if t is None:
        if optional:
            return
        raise NativeShapeError(f"native.{kernel}: {name} is missing; it must be a {dtype} tensor of shape {shape}")
    if t.device.type != "cpu" or t.dtype != dtype or tuple(t.shape) != tuple(shape) or not t.is_contiguous():
        layout = "contiguous" if t.is_contiguous() else f"strides {t.stride()}"
        raise NativeShapeError(
            f"native.{kernel}: {name} must be a contiguous {dtype} CPU tensor of shape "
            f"{tuple(shape)}; got {tuple(t.shape)} {t.dtype} on {t.device} ({layout})"
        )


def expect_size(
    kernel: str, what: str, value: int, *, multiple: int = 1, allowed: tuple[int, ...] = (), at_least: int = 1
) -> None:
    """Raise unless the size `value` is at least `at_least`, a multiple of `multiple` and (if given) in `allowed`."""
    if value < at_least or value % multiple or (allowed and value not in allowed):
        rule = f"one of {allowed}" if allowed else f"a multiple of {multiple}" if multiple > 1 else f">= {at_least}"
        raise NativeShapeError(f"native.{kernel}: {what} = {value} is not {rule}")


def expect_projection(kernel: str, w: Tensor | None, d: int, heads: int, h: int) -> tuple[int, int]:
    """Check a projection (heads_w, d, m) whose head bh reads w[bh % heads_w]: heads_w 1 (shared), h (per head) or
    heads (per batch row and head), m a multiple of 16 -> (m, heads_w); without one (m = d): (d, 1)."""
    if w is None:
        return d, 1
    if w.dim() != 3 or w.shape[0] not in (1, h, heads):
        raise NativeShapeError(
            f"native.{kernel}: the projection must be (1, {d}, M), ({h}, {d}, M) or ({heads}, {d}, "
            f"M) for {h} heads; got {tuple(w.shape)}: build the attention with num_heads={h}, "
            f"or num_heads=1 to share one head's parameters"
        )
    expect(kernel, "the projection", w, (w.shape[0], d, w.shape[2]))
    expect_size(kernel, "its feature count M", w.shape[2], multiple=16)
    return w.shape[2], w.shape[0]


def expect_rows(kernel: str, q: Tensor, *others: tuple[str, Tensor, int | None]) -> tuple[int, int, int, int]:
    """Check q (B, H, N, d), d a multiple of 16, and each (name, tensor, width) as (B, H, N, width or d), widths
    among VALUE_WIDTHS -> (B, H, N, d)."""
    if q.dim() != 4:
        raise NativeShapeError(f"native.{kernel}: queries must be (B, H, N, d); got shape {tuple(q.shape)}")
    b, h, n, d = q.shape
    expect(kernel, "q", q, (b, h, n, d))
    expect_size(kernel, "the head width d", d, multiple=16)
    for name, t, width in others:
        if width is not None:
            expect_size(kernel, f"the width of {name}", width, allowed=VALUE_WIDTHS)
        expect(kernel, name, t, (b, h, n, d if width is None else width))
    return b, h, n, d


def expect_threads(kernel: str, threads: int) -> None:
    expect_size(kernel, "threads", threads)


def expect_call(
    kernel: str, spec: NativeSpec, q: Tensor, k: Tensor, v: Tensor, real: Tensor | None, threads: int
) -> tuple[int, int, int, int]:
    """The checks of a whole-attention call: q, k (B, H, N, d), v (B, H, N, Dv), the map's kind and projection,
    `real` (B, N) uint8 or None, threads >= 1 -> (B, H, N, d)."""
    if spec.kind not in KINDS:
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} is not one of {sorted(KINDS)}")
    b, h, n, d = expect_rows(kernel, q, ("k", k, None), ("v", v, v.shape[-1]))
    if spec.weights is None and spec.kind != "elu":
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} needs a projection (weights)")
    expect_projection(kernel, spec.weights, d, b * h, h)
    if spec.kind in PAPER_KINDS and spec.weights is None:
        raise NativeShapeError(f"native.{kernel}: feature kind {spec.kind!r} needs a projection (weights)")
    if spec.kind == "cos2":
        expect(kernel, "the cos2 phases", spec.phase, (spec.weights.shape[0], spec.weights.shape[-1]))
    expect(kernel, "the key mask", real, (b, n), torch.uint8, optional=True)
    expect_threads(kernel, threads)
    return b, h, n, d


def expect_saved(
    kernel: str, spec: NativeSpec, saved: list[Tensor | None], heads: int, n: int, d: int, dv: int
) -> None:
    """`Attention`'s buffers in struct Saved's order: the state (heads, F, Dv), (heads, F), its offsets (heads, Dv),
    (heads,), favor's log max (heads,), then the kept features (heads, N, F) twice and the keys' row maxima
    (heads, N), those three all given or all None."""
    f = spec.num_features if spec.weights is not None else d
    if len(saved) != 8:
        raise NativeShapeError(f"native.{kernel}: saved must hold 8 buffers (struct Saved); got {len(saved)}")
    for name, t, shape in (
        ("s_kv", saved[0], (heads, f, dv)),
        ("s_ksum", saved[1], (heads, f)),
        ("off_kv", saved[2], (heads, dv)),
        ("off_den", saved[3], (heads,)),
    ):
        expect(kernel, f"saved {name}", t, shape)
    expect(kernel, "saved log_max", saved[4], (heads,), optional=spec.kind != "favor")
    kept = saved[5] is not None
    for name, t, shape in (
        ("phi_q", saved[5], (heads, n, f)),
        ("phi_k", saved[6], (heads, n, f)),
        ("row_max_k", saved[7], (heads, n)),
    ):
        if kept:
            expect(kernel, f"saved {name}", t, shape)
        elif t is not None:
            raise NativeShapeError(f"native.{kernel}: saved {name} given without saved phi_q; give all three or none")


def expect_conv(kernel: str, v: Tensor, size: int, threads: int) -> tuple[int, int, int, int]:
    """v (B, H, N, Dv) contiguous float32, Dv in VALUE_WIDTHS, a kernel size >= 1, threads >= 1 -> v's shape."""
    if v.dim() != 4:
        raise NativeShapeError(f"native.{kernel}: values must be (B, H, N, Dv); got shape {tuple(v.shape)}")
    expect_size(kernel, "the value width", v.shape[-1], allowed=VALUE_WIDTHS)
    expect(kernel, "the values", v, tuple(v.shape))
    expect_size(kernel, "the kernel size", size)
    expect_threads(kernel, threads)
    return tuple(v.shape)


def expect_landmarks(
    kernel: str, x: Tensor, land: Tensor, name: str, width: int | None = None, count: int | None = None
) -> None:
    """land (B, H, L, width or d) beside x (B, H, N, d): the same batch and heads, L (or `count`) a multiple of 16."""
    if x.dim() != 4 or land.dim() != 4:
        raise NativeShapeError(
            f"native.{kernel}: {name} and the rows must be 4-d (B, H, ., d); got "
            f"{tuple(land.shape)} and {tuple(x.shape)}"
        )
    b, h, _, d = x.shape
    size = land.shape[2] if count is None else count
    expect_size(kernel, f"the number of landmarks in {name}", size, multiple=16)
    if tuple(land.shape) != (b, h, size, d if width is None else width):
        raise NativeShapeError(
            f"native.{kernel}: {name} must be ({b}, {h}, {size}, {d if width is None else width}) "
            f"beside rows {tuple(x.shape)}; got {tuple(land.shape)}"
        )
