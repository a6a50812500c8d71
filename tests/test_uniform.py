"""Uniform attention: the mean of the values over the real tokens, written out as a loop."""

import pytest
import torch

from attnbench.attention_properties import PROPERTIES, check_property
from attnbench.registry import build_attention


@pytest.mark.parametrize("causal", [False, True])
def test_uniform_is_the_mean_of_the_real_values(causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    v[1, :, 3:] = float("nan")  # padded values are never read
    out = build_attention("uniform", head_dim=4, causal=causal)(q, k, v, key_padding_mask=mask)
    for b in range(2):
        real = int(mask[b].sum())
        for i in range(real):
            upto = i + 1 if causal else real
            torch.testing.assert_close(out[b, :, i], v[b, :, :upto].mean(dim=1))
    assert torch.isfinite(out[1, :, :3]).all()


@pytest.mark.parametrize("prop", PROPERTIES)
def test_uniform_has_every_property(prop):
    assert not [v.line() for v in check_property("uniform", prop) if v.ok is False]
