"""Chunked passes over positions (the training forms of the gated and delta-rule recurrences): (B, H, N, ...) split
into chunks of C positions, C never longer than the sequence.

A chunk holds C positions whose interactions cost O(C^2) and whose state crosses chunk ends; a `chunk_size` above
N would pad the sequence up to it (DeltaNet with chunk_size 4096 at N = 32: 128x the rows, x900-7500 the time) for
the same outputs, so every chunked pass takes `chunk_length(chunk_size, N)`, N where that is shorter.
"""

from __future__ import annotations

from torch import Tensor, nn


def chunk_length(chunk: int, n: int) -> int:
    """The chunk a pass over n positions uses: `chunk`, or n where the sequence is shorter (at least 1)."""
    return max(1, min(chunk, n))


def split_chunks(x: Tensor, c: int) -> Tensor:
    """(B, H, N, ...) -> (B, H, N / C, C, ...), zero-padded at the end to a multiple of C."""
    pad = (-x.shape[2]) % c
    if pad:
        x = nn.functional.pad(x, (0, 0) * (x.dim() - 3) + (0, pad))
    return x.view(*x.shape[:2], x.shape[2] // c, c, *x.shape[3:])
