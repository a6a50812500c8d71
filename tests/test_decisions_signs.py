"""The timing check's verdicts: sign tests against the binomial by hand, equivalence within a ratio's margin, and the
family's correction (statsmodels' Holm)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from attnbench.decisions.signs import equivalence_p, sign_p, timing_verdicts


def test_sign_p_is_the_exact_binomial_by_hand() -> None:
    assert sign_p(10, 0) == pytest.approx(2 / 2**10)  # every pair one way
    assert sign_p(6, 4) == pytest.approx(2 * 386 / 1024)  # 2 P(X >= 6), X ~ Bin(10, 1/2)
    assert math.isnan(sign_p(0, 0))


def test_equivalence_needs_the_median_inside_the_margin_on_both_sides() -> None:
    inside = np.full(12, 1.02)  # every ratio within 1 +- 10%: both one-sided p = 2**-12
    assert equivalence_p(inside, 0.1) == pytest.approx(2 * 2**-12)
    outside = np.full(12, 1.3)  # all beyond 1.1: the upper test cannot reject
    assert equivalence_p(outside, 0.1) == 1.0
    assert math.isnan(equivalence_p(inside, 0.0)) and math.isnan(equivalence_p(np.array([]), 0.1))


def test_verdicts_are_corrected_over_the_family() -> None:
    faster, slower = np.array([16, 0, 9, 8]), np.array([0, 16, 7, 0])
    ratios = [np.full(16, 2.0), np.full(16, 0.5), np.r_[np.full(9, 1.01), np.full(7, 0.99)], None]
    found = timing_verdicts(faster, slower, ratios, 0.1)
    p = np.array([sign_p(f, s) for f, s in zip(faster, slower)])
    assert np.allclose(found["p_adjusted"], multipletests(p, method="holm")[1])
    # 8 of 8 (p = 0.0078) passes Holm's step for the third smallest of four (2 p = 0.016); without ratios stored, no
    # equivalence can be read, and 9 of 16 is neither separated nor, without its ratios, equivalent
    assert list(found["verdict"]) == ["ahead", "behind", "equivalent", "ahead"]
    crowded = timing_verdicts(np.full(10, 8), np.zeros(10), [None] * 10, 0.1)
    assert set(crowded["verdict"]) == {"undecided"}  # ten checks of 8 of 8: Holm's first step needs 10 p < 0.05
    assert timing_verdicts(np.array([5]), np.array([3]), [None], 0.1)["verdict"][0] == "undecided"
