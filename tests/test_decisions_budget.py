"""Which undecided pairs `run --until-decided` spends seeds on (`attnbench.decisions.budget`), against the power of
the paired t-test integrated here over the chi-square of its variance (not through the noncentral t the engine
uses; statsmodels' TTestPower goes through it too, and its solver stops short at 2 degrees of freedom)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
from scipy import integrate, stats
from scipy.optimize import brentq

from attnbench.decisions.budget import AT_BUDGET, BEYOND_BUDGET, DECIDED, WORTH, budget_state, budget_states

LEVEL = 0.05 / 3  # Holm's planning level over three pairs


def _power(shift: float, df: int, alpha: float) -> float:
    """P(|Z + shift| > c * sqrt(V / df)), V ~ chi-square(df): the two-sided t-test's power at a true gap of `shift`
    standard errors."""
    c = stats.t.isf(alpha / 2, df)

    def given(v: float) -> float:
        scaled = c * (v / df) ** 0.5
        return (stats.norm.sf(scaled - shift) + stats.norm.cdf(-scaled - shift)) * stats.chi2.pdf(v, df)

    return integrate.quad(given, 0, math.inf)[0]


def _mde(seeds: int, alpha: float, sd: float) -> float:
    """The gap a paired t over `seeds` seeds (differences of standard deviation `sd`) detects with power 0.8."""
    return brentq(lambda shift: _power(shift, seeds - 1, alpha) - 0.8, 0.1, 100.0) * sd / math.sqrt(seeds)


def _row(estimate: float, n_seeds: int, mde: float, **extra) -> SimpleNamespace:
    return SimpleNamespace(verdict="undecided", estimate=estimate, n_seeds=n_seeds, mde=mde, seeds_needed=math.nan,
                           **extra)  # fmt: skip


def test_the_gap_detectable_at_the_budget_follows_the_t_power_of_its_seeds() -> None:
    now, at_six = _mde(3, LEVEL, 0.02), _mde(6, LEVEL, 0.02)  # at the seeds run, and at the budget
    assert at_six < now * math.sqrt(3 / 6) / 2  # the t quantile at 2 degrees of freedom, not only the root, shrinks
    spread = {"per_seed": 0.02**2, "fixed": 0.0}  # the seeds' variance of the differences; fresh rows
    assert budget_state(_row(1.02 * at_six, 3, now, **spread), 6, LEVEL) == WORTH
    assert budget_state(_row(0.98 * at_six, 3, now, **spread), 6, LEVEL) == BEYOND_BUDGET


def test_decided_spent_and_unknown_pairs_get_no_seeds() -> None:
    decided = SimpleNamespace(verdict="behind", estimate=-0.1, n_seeds=3, mde=0.05, seeds_needed=4.0)
    assert budget_state(decided, 6, LEVEL) == DECIDED
    assert budget_state(_row(0.5, 6, 0.1), 6, LEVEL) == AT_BUDGET
    assert budget_state(_row(0.5, 1, math.nan), 6, LEVEL) == BEYOND_BUDGET  # one seed: nothing known
    assert budget_state(_row(0.5, 3, math.inf), 6, LEVEL) == BEYOND_BUDGET  # past the range, nothing to project


def test_a_gap_past_the_range_at_three_seeds_is_projected_to_the_budget_from_its_variance() -> None:
    """A needle pair: seed differences of sd 0.3 at 3 seeds leave an mde past an accuracy's range (inf), yet at 8
    seeds a gap of 0.77 is detectable; the row's variance components say so (seeds-only: fixed 0)."""
    sd = 0.3
    assert _mde(3, LEVEL, sd) > 1  # what the engine reports as inf for a metric bounded in [0, 1]
    at_eight = _mde(8, LEVEL, sd)
    assert at_eight < 0.77
    for factor, state in ((1.02, WORTH), (0.98, BEYOND_BUDGET)):
        assert budget_state(_row(factor * at_eight, 3, math.inf, per_seed=sd**2, fixed=0.0), 8, LEVEL) == state
    # shared test rows: a part of the variance no number of seeds removes (Var at S seeds = per_seed / S + fixed)
    shift = _mde(8, LEVEL, 1.0) * math.sqrt(8)  # the detectable gap in standard errors at 8 seeds
    fixed = 0.01
    at_eight = shift * math.sqrt(sd**2 / 8 + fixed)
    for factor, state in ((1.02, WORTH), (0.98, BEYOND_BUDGET)):
        assert budget_state(_row(factor * at_eight, 3, math.inf, per_seed=sd**2, fixed=fixed), 8, LEVEL) == state


def test_each_family_is_planned_at_its_own_level() -> None:
    now = {m: _mde(3, 0.05 / m, 0.02) for m in (1, 3)}
    at_six = {m: _mde(6, 0.05 / m, 0.02) for m in (1, 3)}
    gap = (at_six[1] + at_six[3]) / 2  # detectable at six seeds alone, not among three pairs
    rows = pd.DataFrame(
        [{"task": "one", "metric": "accuracy", "p": 0.2, "mde": now[1]}]
        + [{"task": "three", "metric": "accuracy", "p": 0.2, "mde": now[3]}] * 3
    ).assign(verdict="undecided", estimate=gap, n_seeds=3, seeds_needed=math.nan, correction="holm", per_seed=0.02**2,
             fixed=0.0)  # fmt: skip
    assert budget_states(rows, 6, 0.05) == [WORTH, BEYOND_BUDGET, BEYOND_BUDGET, BEYOND_BUDGET]
