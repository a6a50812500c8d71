"""Power figures against statsmodels' t-test power and against simulation."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from statsmodels.stats.power import TTestPower

from attnbench.decisions.power import mde, seeds_needed
from attnbench.decisions.variance import Spread, over_seeds


def _spread(sd: float, seeds: int, fixed: float = 0.0) -> Spread:
    per_seed = np.array([sd**2])
    return Spread(
        mean=np.zeros(1),
        se=np.sqrt(per_seed / seeds + fixed),
        df=np.array([seeds - 1.0]),
        seeds=seeds,
        per_seed=per_seed,
        fixed=np.array([fixed]),
    )


def test_seeds_needed_matches_statsmodels_one_sample_t_power() -> None:
    for sd, margin, alpha in ((0.02, 0.01, 0.05), (0.05, 0.01, 0.05 / 78), (0.01, 0.02, 0.01)):
        nobs = TTestPower().solve_power(effect_size=margin / sd, alpha=alpha, power=0.8, alternative="two-sided")
        assert seeds_needed(_spread(sd, 3), np.array([margin]), alpha)[0] == max(2, math.ceil(nobs))


def test_mde_is_detected_with_power_point_eight() -> None:
    rng = np.random.default_rng(0)
    seeds, sd, alpha = 5, 0.03, 0.01
    effect = mde(_spread(sd, seeds), alpha)[0]
    draws = rng.normal(effect, sd, (20000, seeds))
    result = stats.ttest_1samp(draws, 0.0, axis=1)
    assert abs((result.pvalue < alpha).mean() - 0.8) < 0.015


def test_a_shared_test_set_can_make_a_margin_undecidable() -> None:
    reachable = seeds_needed(_spread(0.02, 3, fixed=0.001**2), np.array([0.01]), 0.05)[0]
    assert reachable > 3
    assert np.isnan(seeds_needed(_spread(0.02, 3, fixed=0.01**2), np.array([0.01]), 0.05)[0])  # se floor 0.01
    assert np.isnan(seeds_needed(_spread(0.02, 3), np.array([np.nan]), 0.05)[0])  # no margin: not known


def test_no_spread_gives_no_power_figures() -> None:
    coincident = over_seeds(np.array([[0.5, 0.5, 0.5]]))
    assert np.isnan(mde(coincident, 0.05)[0]) and np.isnan(seeds_needed(coincident, np.array([0.01]), 0.05)[0])
