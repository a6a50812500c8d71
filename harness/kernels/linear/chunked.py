"""The chunked rendering without gradients, in PyTorch: key sums block by block, then query blocks against them,
one range of blocks per CPU thread (`cpu_threads`)."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attnbench.kernels.cpu_threads import chunk_rows, run_on_threads, scratch, split_rows
from attnbench.kernels.linear.contract import FeatureChunk, FeatureMap, feature_count
from attnbench.kernels.linear.parallel import guard_denominator, padding_weights


def _takes_out(method: Callable[..., Any]) -> bool:
    """Whether a feature map's chunk method accepts the `out` scratch buffer (plugins written before it may not)."""
    try:
        return "out" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


class _KeyState:
    """Running sums over key blocks: A = sum phi~_j v_j^T (B*H, M, D) and a = sum phi~_j (B*H, M, 1), where
    phi~ = values * row_weights * exp(log_scale - running max); scale and offset are applied by `finish`."""

    def __init__(self) -> None:
        self.kv: Tensor | None = None
        self.ksum: Tensor | None = None
        self.log_max: Tensor | None = None
        self.scale, self.offset = 1.0, 0.0

    def add(self, chunk: FeatureChunk, v: Tensor, padded: Tensor | None) -> None:
        """Accumulate one block: chunk.values (B, H, C, M), v (B, H, C, D), padded (B, 1, C, 1) True = padding.

        Row weights and the block's log-scale are folded into v (C x D), never into the C x M values; the sums
        grow in place (baddbmm_), rescaled first when the block raises the running maximum."""
        values = chunk.values
        if padded is not None:
            values = values.masked_fill_(padded, 0.0)  # fill, not multiply: padded features may be inf
        self.scale, self.offset = chunk.scale, chunk.offset
        weights = chunk.row_weights  # (B, H, C, 1) or None
        if chunk.log_scale is not None:
            factor = self._raise_max(chunk.log_scale.flatten(0, 1))  # (B*H, 1, 1): exp(block max - running max)
            factor = factor.view(*chunk.log_scale.shape)
            weights = factor.expand(*values.shape[:-2], 1, 1) if weights is None else weights * factor
        vals3, v3 = values.flatten(0, 1), v.flatten(0, 1)
        if self.kv is None:
            heads, m, d = vals3.shape[0], vals3.shape[2], v3.shape[2]
            self.kv, self.ksum = v3.new_zeros(heads, m, d), v3.new_zeros(heads, m, 1)
        if weights is None:
            self.kv.baddbmm_(vals3.transpose(1, 2), v3)
            self.ksum.add_(vals3.sum(dim=1).unsqueeze(-1))  # a sum: much cheaper than a matrix-vector product
        else:
            self.kv.baddbmm_(vals3.transpose(1, 2), (v * weights).flatten(0, 1))
            self.ksum.baddbmm_(vals3.transpose(1, 2), weights.expand(*values.shape[:-1], 1).flatten(0, 1))

    def _raise_max(self, log_scale: Tensor) -> Tensor:
        """Take a block's log-scale (B*H, 1, 1) into the running maximum, rescaling the sums so far to it;
        returns the block's factor exp(log_scale - running max) (0 for a block without real keys)."""
        new = log_scale if self.log_max is None else torch.maximum(self.log_max, log_scale)
        safe = new.masked_fill(new == -math.inf, 0.0)  # no real key yet: every term is 0
        if self.kv is not None:
            old_factor = torch.exp(self.log_max - safe)
            self.kv.mul_(old_factor)
            self.ksum.mul_(old_factor)
        self.log_max = new
        return torch.exp(log_scale - safe)

    def merge(self, other: "_KeyState") -> None:
        """Add the sums of another range of blocks."""
        if other.kv is None:
            return
        self.scale, self.offset = other.scale, other.offset
        kv, ksum = other.kv, other.ksum
        if other.log_max is not None:
            factor = self._raise_max(other.log_max)
            kv, ksum = kv * factor, ksum * factor
        if self.kv is None:
            self.kv, self.ksum = kv, ksum
        else:
            self.kv.add_(kv)
            self.ksum.add_(ksum)

    def finish(self, v: Tensor, weights: Tensor | None) -> tuple[Tensor, Tensor]:
        """phi_k^T v (B*H, M, D) and sum_j phi_k_j (B*H, M, 1), scale and offset applied."""
        kv, ksum = self.kv, self.ksum
        if self.offset != 0.0:
            b, h = v.shape[:2]
            if weights is None:
                real_v, count = v, float(v.shape[-2])
            else:
                real_v = v * weights
                count = weights.sum(dim=-2, keepdim=True).expand(b, h, 1, 1).flatten(0, 1)  # (B*H, 1, 1)
            kv = kv + self.offset * real_v.sum(dim=-2, keepdim=True).flatten(0, 1)
            ksum = ksum + self.offset * count
        return kv * self.scale, ksum * self.scale


@torch.no_grad()
def pytorch_chunked_attention(
    feature_map: FeatureMap,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    eps: float = 1e-6,
    rows: int | None = None,
) -> Tensor:
    """The non-causal kernel block by block in PyTorch, `rows` per block (default `chunk_rows`). On CPU the
    sequence is split into one range of blocks per thread (`run_on_threads`): key sums per range, merged, then
    each range's queries. A block's features go into the thread's `scratch` buffer when the map takes `out`."""
    b, h, n, d = v.shape
    m = feature_count(feature_map, q)
    rows = rows or chunk_rows(q, m)
    ranges = split_rows(n, rows, q.device)
    key_out, query_out = _takes_out(feature_map.key_chunk), _takes_out(feature_map.query_chunk)

    def block_buffer(size: int, takes_out: bool) -> dict[str, Tensor]:
        return {"out": scratch((b, h, size, m), q.dtype, q.device)} if takes_out else {}

    def key_sums(first: int, stop: int) -> _KeyState:
        state = _KeyState()
        for start in range(first, stop, rows):
            block = slice(start, min(start + rows, stop))
            mask = None if key_padding_mask is None else key_padding_mask[:, block]
            chunk = feature_map.key_chunk(k[:, :, block], mask, **block_buffer(block.stop - start, key_out))
            state.add(chunk, v[:, :, block], None if mask is None else ~mask[:, None, :, None])
        return state

    out = torch.empty(b, h, n, d, dtype=v.dtype, device=v.device)
    out3 = out.view(b * h, n, d)

    def queries(first: int, stop: int) -> None:
        state_q = None
        for start in range(first, stop, rows):
            block = slice(start, min(start + rows, stop))
            chunk = feature_map.query_chunk(q[:, :, block], **block_buffer(block.stop - start, query_out))
            if state_q is None:  # scale, offset are the same for every block: fold them into the state once
                state_q = _query_state(kv, ksum, chunk.scale, chunk.offset)
            values = chunk.values.flatten(0, 1)  # (B*H, C, M)
            s_kv, s_ksum, offsets = state_q
            if chunk.row_weights is not None and offsets is not None:  # without an offset they cancel in the ratio
                values = values * chunk.row_weights.flatten(0, 1)
            num = out3[:, block]  # the numerator is written in place of the output, then divided
            torch.bmm(values, s_kv, out=num)
            den = torch.bmm(values, s_ksum)
            if offsets is not None:
                num.add_(offsets[0])
                den.add_(offsets[1])
            num.div_(guard_denominator(den, eps))

    with feature_map.holding_derived():
        states = run_on_threads(key_sums, ranges)
        for other in states[1:]:
            states[0].merge(other)
        kv, ksum = states[0].finish(v, padding_weights(v, key_padding_mask))  # (B*H, M, D), (B*H, M, 1)
        run_on_threads(queries, ranges)
    return out


def _query_state(kv: Tensor, ksum: Tensor, scale: float, offset: float) -> tuple:
    """What query values meet: scale kv, scale ksum and, for an offset, offset times their column sums."""
    s_kv, s_ksum = kv * scale, ksum * scale
    if offset == 0.0:
        return s_kv, s_ksum, None
    return s_kv, s_ksum, (offset * s_kv.sum(dim=1, keepdim=True), offset * s_ksum.sum(dim=1, keepdim=True))
