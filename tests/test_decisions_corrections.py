"""Corrections over a family: statsmodels' adjusted p-values, and per-pair levels whose intervals agree with them."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from attnbench.decisions.corrections import adjust, levels, planning_level, uncapped


@pytest.mark.parametrize("correction, method", [("holm", "holm"), ("bh", "fdr_bh")])
def test_uncapped_is_statsmodels_before_its_cap(correction: str, method: str) -> None:
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.random(40) ** 3, [np.nan, 0.0]])
    finite = np.isfinite(p)
    expected = multipletests(p[finite], method=method)[1]
    assert np.allclose(np.minimum(uncapped(p, correction)[finite], 1.0), expected)
    assert np.allclose(adjust(p, correction)[finite], expected) and np.isnan(adjust(p, correction)[~finite]).all()


@pytest.mark.parametrize("correction", ["holm", "bh", "none"])
def test_an_interval_at_its_level_excludes_zero_exactly_when_the_adjusted_p_is_below_alpha(correction: str) -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        t = rng.normal(0, 3, 30)
        df = np.full(30, 4.0)
        p = 2 * stats.t.sf(np.abs(t), df)
        level = levels(p, correction, 0.05)
        excludes_zero = np.abs(t) > stats.t.isf(level / 2, df)
        significant = adjust(p, correction) < 0.05
        border = np.isclose(np.abs(t), stats.t.isf(level / 2, df))
        assert np.array_equal(excludes_zero[~border], significant[~border])
        assert (level <= 0.05 + 1e-15).all()


def test_holm_levels_are_its_step_down_levels() -> None:
    p = np.array([0.001, 0.004, 0.03, 0.5])
    assert np.allclose(levels(p, "holm", 0.05)[:2], [0.05 / 4, 0.05 / 3])
    assert planning_level(4, "holm", 0.05) == 0.0125 and planning_level(4, "none", 0.05) == 0.05


def test_an_unknown_correction_is_refused() -> None:
    with pytest.raises(ValueError, match="use 'holm'"):
        adjust(np.array([0.1]), "bonferroni")  # type: ignore[arg-type]
