"""The fused rendering: the non-causal kernel through the fused CPU kernels (`attnbench.kernels.native`), with
or without gradients."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch
from torch import Tensor

from attnbench.kernels import native
from attnbench.kernels.linear.contract import no_grad_recorded
from attnbench.kernels.native import NativeSpec


def fused_linear_attention(
    spec: NativeSpec,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    eps: float,
    threads: int | None = None,
) -> Tensor:
    """The non-causal kernel through the fused CPU kernels, with or without gradients, in one call each way
    (`native.attention`, `native.Attention`): the key and query passes run on `threads` threads (default: torch's
    count), which share out groups of rows and merge their sums in a fixed order. Equals
    `factored_linear_attention` up to rounding, in value and gradients."""
    threads = threads or torch.get_num_threads()
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    real = native.real_rows(key_padding_mask)
    skip = real is not None and getattr(_UNREAD, "on", False)
    if no_grad_recorded(q, k, v, *(() if spec.weights is None else (spec.weights,))):
        return native.attention(spec, q, k, v, real, eps, threads, None, skip)
    return native.Attention.apply(q, k, v, spec.weights, spec, real, eps, threads, skip)


_UNREAD = threading.local()


@contextlib.contextmanager
def padded_queries_unread() -> Iterator[None]:
    """Within (this thread): the caller never reads the outputs at padded positions (key_padding_mask False) nor
    sends gradients into them (the model packs real tokens, attnbench.model), so the fused kernels may skip query rows
    past each sequence's last real token and write 0 there; outputs at real positions are unchanged, bit for bit.
    Other routes compute every row as usual."""
    before = getattr(_UNREAD, "on", False)
    _UNREAD.on = True
    try:
        yield
    finally:
        _UNREAD.on = before
