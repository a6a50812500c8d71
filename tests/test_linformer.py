"""Linformer: naive projected softmax, padding masked before projection, maximum length."""

import math

import pytest
import torch

from attnbench.errors import ConfigError
from attnbench.registry import attention_entry, build_attention


def naive_linformer(q, k, v, e, f, n_real):
    """One (batch, head) over its real tokens: softmax(q (E^T k)^T / sqrt(d)) F^T v with explicit sums."""
    k_proj = torch.stack([sum(e[j, r] * k[j] for j in range(n_real)) for r in range(e.shape[1])])
    v_proj = torch.stack([sum(f[j, r] * v[j] for j in range(n_real)) for r in range(f.shape[1])])
    return torch.softmax(q @ k_proj.T / math.sqrt(q.shape[-1]), -1) @ v_proj


@pytest.mark.parametrize("share_heads", [True, False])
def test_matches_naive_projection_with_padding(share_heads):
    attn = build_attention(
        "linformer", head_dim=4, num_heads=2, max_length=10, projected_length=3, share_heads=share_heads
    ).double()
    assert attn.e_proj.shape == ((1 if share_heads else 2), 10, 3)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 7, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    out = attn(q, k, v, key_padding_mask=mask)
    for b in range(2):
        for h in range(2):
            e = attn.e_proj[0 if share_heads else h].detach()
            f = attn.f_proj[0 if share_heads else h].detach()
            expected = naive_linformer(q[b, h], k[b, h], v[b, h], e, f, int(mask[b].sum()))
            torch.testing.assert_close(out[b, h], expected)


def test_needs_max_length_and_rejects_longer_sequences():
    assert attention_entry("linformer").capabilities.needs_max_length
    with pytest.raises(ConfigError, match="needs max_length"):
        build_attention("linformer", head_dim=4)
    attn = build_attention("linformer", head_dim=4, max_length=8, projected_length=4)
    x = torch.randn(1, 1, 9, 4)
    with pytest.raises(ValueError, match="exceeds linformer's max_length=8"):
        attn(x, x, x)


def test_one_heads_projections_serve_any_heads_and_other_counts_name_num_heads():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 12, 8, generator=g) for _ in range(3))
    shared = build_attention("linformer", head_dim=8, max_length=16, projected_length=4, share_heads=False)
    heads = [shared(q[:, i : i + 1], k[:, i : i + 1], v[:, i : i + 1]) for i in range(4)]
    torch.testing.assert_close(shared(q, k, v), torch.cat(heads, dim=1))
    two = build_attention("linformer", head_dim=8, num_heads=2, max_length=16, projected_length=4, share_heads=False)
    with pytest.raises(ConfigError, match="num_heads=2 but called on 4 heads"):
        two(q, k, v)
