"""Whether more seeds could decide a pair within a budget: what `attnbench run --until-decided` spends seeds on, and
what its report says of the pairs that stayed undecided.

A pair is worth more seeds when it is undecided, has fewer than `max_seeds`, and the engine's power figures
(`attnbench.decisions.power`) say `max_seeds` could decide it: the seeds needed for its margin are within the
budget, or the gap seen so far would be detected there. The gap detectable at the budget comes from the pair's
variance components (`per_seed`, `fixed`: what `attnbench.compare` reports), projected to the budget's seeds as
`seeds_needed` projects them (`attnbench.decisions.power.projected`) and read with the t quantile of the budget's
degrees of freedom (at 3 seeds a Holm-corrected t has 2: its quantiles are several times the normal's, so more seeds
decide far more than the square root alone says). So a pair whose detectable gap at 3 seeds lies past the metric's
range (its `mde` is inf) is still judged at the budget, where it may not. Neither holds for a pair no number of
seeds within the budget can decide (a shared test set too small for the margin, a gap far below the noise).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from attnbench.decisions.corrections import planning_level
from attnbench.decisions.power import mde, projected
from attnbench.decisions.variance import Spread

DECIDED, AT_BUDGET, BEYOND_BUDGET, WORTH = "decided", "budget reached", "beyond the budget", "worth more seeds"


def _detectable_shift(df: float, level: float) -> float:
    """The gap, in standard errors, that a two-sided t-test with `df` degrees of freedom at `level` detects with
    the engine's power (`attnbench.decisions.power.mde` of a unit standard error)."""
    one = np.ones(1)
    return float(mde(Spread(mean=0 * one, se=one, df=df * one, seeds=0, per_seed=one, fixed=0 * one), level)[0])


def budget_state(row: Any, max_seeds: int, level: float) -> str:
    """An engine pair row (attnbench.compare columns) against a budget of `max_seeds` seeds per label, its family's
    planning `level` (`corrections.planning_level`): decided, budget reached, beyond the budget (more seeds within
    it would not decide it), or worth more seeds."""
    if row.verdict != "undecided":
        return DECIDED
    if row.n_seeds >= max_seeds:
        return AT_BUDGET
    if row.n_seeds < 2:
        return BEYOND_BUDGET
    if math.isfinite(row.seeds_needed) and row.seeds_needed <= max_seeds:
        return WORTH
    at_budget = _mde_at_budget(row, max_seeds, level)
    if not (math.isfinite(at_budget) and math.isfinite(row.estimate)):
        return BEYOND_BUDGET
    return WORTH if abs(row.estimate) >= at_budget else BEYOND_BUDGET


def _mde_at_budget(row: Any, max_seeds: int, level: float) -> float:
    """The gap detectable at `max_seeds` seeds, from the row's variance components (NaN where they are unknown or
    both 0: no spread to project)."""
    per_seed, fixed = getattr(row, "per_seed", math.nan), getattr(row, "fixed", math.nan)
    if not (math.isfinite(per_seed) and math.isfinite(fixed) and per_seed + fixed > 0):
        return math.nan
    one = np.ones(1)
    spread = Spread(mean=0 * one, se=one, df=one, seeds=0, per_seed=per_seed * one, fixed=fixed * one)
    se, df = projected(spread, np.array([float(max_seeds)]))
    return float(se[0]) * _detectable_shift(float(df[0]), level)


def budget_states(rows: pd.DataFrame, max_seeds: int, alpha: float) -> list[str]:
    """`budget_state` of every engine pair row, each at its family's planning level (its task and metric's pairs
    with a test, under the rows' correction, at `alpha`)."""
    tested = rows.groupby(["task", "metric"])["p"].transform(lambda p: int(np.isfinite(p).sum()))
    return [
        budget_state(r, max_seeds, planning_level(int(n), r.correction, alpha))
        for r, n in zip(rows.itertuples(), tested)
    ]
