"""Softmax attention against the naive softmax(QK^T / sqrt(d)) V, with padding and causal masks."""

import math

import pytest
import torch

from attnbench.registry import build_attention


def naive_softmax(q, k, v, mask=None, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, N, N)
    n = q.shape[-2]
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    if causal:
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _inputs(n=7, d=8):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, n, d, generator=g) for _ in range(3))
    mask = torch.tensor([[True] * n, [True] * 4 + [False] * (n - 4), [True] + [False] * (n - 1)])
    return q, k, v, mask


@pytest.mark.parametrize("backend", ["auto", "math"])
def test_softmax_matches_naive_with_padding(backend):
    q, k, v, mask = _inputs()
    attn = build_attention("softmax", head_dim=8, num_heads=2, backend=backend)
    out = attn(q, k, v, key_padding_mask=mask)
    torch.testing.assert_close(out, naive_softmax(q, k, v, mask), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(attn(q, k, v), naive_softmax(q, k, v), rtol=1e-5, atol=1e-5)
    assert attn.last_backend in ("math", "flash", "efficient", "cudnn", "auto")
    if backend == "math":
        assert attn.last_backend == "math"


def test_causal_softmax_with_padding_combines_both_masks():
    q, k, v, mask = _inputs()
    attn = build_attention("softmax", head_dim=8, num_heads=2, causal=True)
    out = attn(q, k, v, key_padding_mask=mask)
    expected = naive_softmax(q, k, v, mask, causal=True)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(attn(q, k, v), naive_softmax(q, k, v, causal=True), rtol=1e-5, atol=1e-5)
