"""The variance models of the engine against independent computations: numpy/scipy for seeds only, statsmodels'
two-way ANOVA for the mean squares, and simulated truth for the two-source variance of shared test rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import statsmodels.api as sm
from statsmodels.formula.api import ols

from attnbench.decisions.variance import crossed, mean_squares, nested, over_seeds


def test_over_seeds_is_the_t_standard_error() -> None:
    values = np.array([[0.81, 0.79, 0.84], [0.5, 0.5, 0.5]])
    spread = over_seeds(values)
    assert np.allclose(spread.mean, values.mean(axis=1))
    assert np.isclose(spread.se[0], values[0].std(ddof=1) / np.sqrt(3)) and list(spread.df) == [2.0, 2.0]
    assert spread.se[1] == 0.0  # coincident seeds: exactly no spread (the verdicts read it as degenerate)
    assert np.isnan(over_seeds(np.array([[0.7]])).se[0])  # one seed: nothing known


def test_coincident_values_up_to_float32_rounding_have_no_spread() -> None:
    values = np.array([[np.float32(0.93) - np.float32(0.91), 0.93 - 0.91, np.float32(0.93) - 0.91]])
    assert over_seeds(values).se[0] == 0.0


def test_mean_squares_match_statsmodels_two_way_anova() -> None:
    rng = np.random.default_rng(0)
    y = rng.normal(size=(4, 30)) + rng.normal(size=(4, 1)) + rng.normal(size=(1, 30))
    frame = pd.DataFrame({"y": y.ravel(), "seed": np.repeat(np.arange(4), 30), "example": np.tile(np.arange(30), 4)})
    table = sm.stats.anova_lm(ols("y ~ C(seed) + C(example)", data=frame).fit())
    seed_ms, example_ms, residual_ms = mean_squares(y[None])
    assert np.isclose(seed_ms[0], table.loc["C(seed)", "mean_sq"])
    assert np.isclose(example_ms[0], table.loc["C(example)", "mean_sq"])
    assert np.isclose(residual_ms[0], table.loc["Residual", "mean_sq"])


def test_crossed_variance_matches_the_spread_of_the_mean_over_redrawn_tests() -> None:
    """Shared rows: the variance of the grand mean over redrawn seeds AND examples is tau^2/S + sigma_v^2/N +
    sigma_w^2/(NS); the estimator's mean over many draws recovers it, where seeds alone fall short."""
    rng = np.random.default_rng(1)
    tau, sigma_v, sigma_w, s, n, reps = 0.3, 1.0, 1.0, 4, 50, 4000
    y = rng.normal(0, tau, (reps, s, 1)) + rng.normal(0, sigma_v, (reps, 1, n)) + rng.normal(0, sigma_w, (reps, s, n))
    truth = tau**2 / s + sigma_v**2 / n + sigma_w**2 / (n * s)
    spread = crossed(y)
    assert np.isclose(spread.mean.var(), truth, rtol=0.1)
    assert np.isclose((spread.se**2).mean(), truth, rtol=0.05)
    assert np.isclose((spread.per_seed / s + spread.fixed).mean(), truth, rtol=0.05)
    assert (over_seeds(y.mean(axis=2)).se ** 2).mean() < 0.6 * truth  # seeds only miss the examples' share
    assert list(np.unique(spread.df)) == [s - 1]


def test_nested_keeps_the_example_floor_when_seeds_coincide() -> None:
    rng = np.random.default_rng(2)
    outcomes = (rng.random((1, 3, 400)) < 0.7).astype(float)
    assert np.isclose(nested(outcomes).se[0], over_seeds(outcomes.mean(axis=2)).se[0])  # fresh rows: the seeds say it
    outcomes[0, 1:] = outcomes[0, 0]  # three seeds that scored the same examples identically
    spread = nested(outcomes)
    within = outcomes[0, 0].var(ddof=1) / 400
    assert np.isclose(spread.se[0] ** 2, within / 3)  # never a zero-width interval
    assert over_seeds(outcomes.mean(axis=2)).se[0] == 0.0  # what the seeds alone would say
