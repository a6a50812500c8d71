"""CPU threading for the block-by-block renderings: rows per block, one range of blocks per thread on a pool of
single-threaded workers, torch's thread count set around small operations, and per-thread scratch buffers."""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

CHUNK_ELEMENTS = 2**21  # chunked kernel (CPU): floats of one block's features, inputs and values (8 MiB)
MIN_CHUNK_ROWS = 64


def chunk_rows(q: Tensor, num_features: int) -> int:
    """Rows per block of the chunked kernel: on CPU, a block's features, inputs and values ((B*H, rows, M + 2D)
    floats) within CHUNK_ELEMENTS (a few thousand rows, where MKL runs the block's skinny products fastest
    here; a few hundred, which would stay in L2, ran them 1.3-1.7x slower); all rows on GPU."""
    b, h, n, d = q.shape
    if q.device.type != "cpu":
        return n
    return max(MIN_CHUNK_ROWS, CHUNK_ELEMENTS // max(1, b * h * (num_features + 2 * d)) // 16 * 16)


def split_rows(n: int, rows: int, device: torch.device) -> list[tuple[int, int]]:
    """Contiguous ranges of whole blocks, one per CPU thread (one range on GPU or with one thread)."""
    parts = torch.get_num_threads() if device.type == "cpu" else 1
    blocks = -(-n // rows)
    per_part = -(-blocks // max(1, min(parts, blocks)))
    return [(start, min(n, start + per_part * rows)) for start in range(0, n, per_part * rows)]


_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def run_on_threads(fn: Callable[[int, int], Any], ranges: list[tuple[int, int]]) -> list[Any]:
    """fn(start, stop) for each range: in the calling thread for one range, else each on its own thread with
    torch single-threaded inside, so the threads never meet at a barrier until they are all done (per-operation
    parallel regions on small blocks cost more than the block's work, and stall whenever another process holds
    a core). torch's thread count is global, so it is restored afterwards."""
    if len(ranges) == 1:
        return [fn(*ranges[0])]
    global _POOL
    threads = torch.get_num_threads()
    if _POOL is None or _POOL._max_workers < len(ranges):
        _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=len(ranges), thread_name_prefix="attnbench-kernel")

    def single_threaded(bounds: tuple[int, int]) -> Any:
        torch.set_num_threads(1)
        with torch.no_grad():
            return fn(*bounds)

    try:
        return list(_POOL.map(single_threaded, ranges))
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op thread count set to `count` within, restored after. For the small operations around the
    fused kernels: too small to gain from threads, and torch's workers, spinning for a while after a parallel
    operation, would take the cores from the kernels' own helper threads in the next call (measured with a
    std::thread build of the kernels: 40-60% slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_SCRATCH = threading.local()


def scratch(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, slot: int = 0) -> Tensor:
    """A per-thread CPU scratch tensor of `shape`, reused across blocks and calls (its contents are garbage).

    One buffer per thread and slot (the kernel hands maps slot 0; maps take 1 for a second block-sized
    temporary, 2 and 3 for sin and cos; Nystromformer's convolution takes 2 outside the block loop), grown
    when a larger one is asked for, so the block loop never maps fresh memory; on other devices a new
    tensor (their caching allocators already reuse memory)."""
    if device.type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    size = math.prod(shape)
    buffers = getattr(_SCRATCH, "buffers", None)
    if buffers is None:
        buffers = _SCRATCH.buffers = {}
    held = buffers.get((dtype, slot))
    if held is None or held.numel() < size:
        held = buffers[dtype, slot] = torch.empty(size, dtype=dtype)
    return held[:size].view(shape)
