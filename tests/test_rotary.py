"""Rotary positions against a hand computation: each plane turned by position x frequency, norms kept, and the
query-key dot product a function of the offset alone."""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.rotary import rotary_angles, rotary_frequencies, rotate


def test_each_plane_turns_by_position_times_its_frequency_as_written_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)  # one position, D = 4: planes (x0, x2), (x1, x3)
    p, base = 3, 10000.0
    cos, sin = rotary_angles(torch.tensor([p]), 4, base)
    out = rotate(x, cos, sin)[0].tolist()
    a0, a1 = p * 1.0, p * base ** (-2 / 4)  # theta_0 = 1, theta_1 = base^(-1/2)
    by_hand = [
        1.0 * math.cos(a0) - 3.0 * math.sin(a0),
        2.0 * math.cos(a1) - 4.0 * math.sin(a1),
        1.0 * math.sin(a0) + 3.0 * math.cos(a0),
        2.0 * math.sin(a1) + 4.0 * math.cos(a1),
    ]
    assert out == pytest.approx(by_hand, abs=1e-12)
    assert rotary_frequencies(8, 100.0).tolist() == pytest.approx([1.0, 100**-0.25, 100**-0.5, 100**-0.75])


def test_position_zero_is_the_identity_and_norms_are_kept():
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    cos, sin = rotary_angles(torch.arange(5), 8)
    out = rotate(x, cos, sin)
    assert torch.equal(out[..., 0, :], x[..., 0, :])
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-12)


def test_query_key_products_depend_on_the_offset_only():
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)

    def product(m: int, n: int) -> float:
        cos, sin = rotary_angles(torch.tensor([m, n]), 16)
        rq, rk = rotate(torch.stack([q, q]), cos, sin)[0], rotate(torch.stack([k, k]), cos, sin)[1]
        return float(rq @ rk)

    for m, n in ((5, 2), (0, 7), (40, 40)):
        for shift in (1, 13, 1000):
            assert product(m + shift, n + shift) == pytest.approx(product(m, n), abs=1e-9)
    assert product(5, 2) != pytest.approx(product(5, 3), abs=1e-6)  # and it does see the offset


def test_an_odd_head_dimension_is_refused():
    with pytest.raises(ValueError, match="must be even, not 5"):
        rotary_frequencies(5)
