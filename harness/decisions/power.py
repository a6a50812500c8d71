"""Power of the two-sided t-test the engine runs: the minimum detectable effect at the seeds run, and the seeds
that would decide a gap of +-margin.

Power at a true gap delta with standard error se and df degrees of freedom, at level alpha: the noncentral t's
P(|T| > t_{1 - alpha/2, df}) with noncentrality delta / se (scipy.stats.nct). `mde`: the delta where that power is
0.8. `seeds_needed`: the fewest seeds S' whose projected standard error (`attnbench.decisions.variance.Spread`:
per_seed / S' + fixed, S' - 1 degrees of freedom) gives power 0.8 at delta = margin; NaN where no number
of seeds can (the shared test set's own error is too large for the margin) or nothing is known (one seed, no
spread, no margin).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from attnbench.decisions.variance import Spread

POWER = 0.8
MAX_SEEDS = 100_000  # searched up to; more than this reads as "no number of seeds"


def power(delta: np.ndarray, se: np.ndarray, df: np.ndarray, alpha: float) -> np.ndarray:
    """Probability that the two-sided t-test at `alpha` rejects when the true gap is `delta` (elementwise)."""
    critical = stats.t.isf(alpha / 2, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = np.abs(delta) / se
        upper = stats.nct.sf(critical, df, shift)
        lower = stats.nct.cdf(-critical, df, shift)
    # scipy's noncentral t returns NaN far out in its tails: there the normal's tail (upper) or 0 (lower) holds
    upper = np.where(np.isnan(upper), stats.norm.sf(critical - shift), upper)
    return upper + np.nan_to_num(lower, nan=0.0)


def _noncentrality(df: np.ndarray, alpha: float, target: float = POWER) -> np.ndarray:
    """The noncentrality (delta / se) at which power reaches `target`, per df (vectorised bisection)."""
    df = np.asarray(df, dtype=float)
    low = np.zeros_like(df)
    high = np.full_like(df, 1.0)
    for _ in range(60):  # grow the bracket until power(high) >= target (df >= 1 needs at most a few hundred)
        short = power(high, np.ones_like(df), df, alpha) < target
        if not short.any():
            break
        high = np.where(short, high * 2, high)
    for _ in range(50):
        middle = (low + high) / 2
        enough = power(middle, np.ones_like(df), df, alpha) >= target
        high, low = np.where(enough, middle, high), np.where(enough, low, middle)
    return high


def mde(spread: Spread, alpha: float) -> np.ndarray:
    """The smallest |gap| detected with power 0.8 at the seeds run (NaN where the spread is 0 or unknown)."""
    usable = np.isfinite(spread.se) & (spread.se > 0) & np.isfinite(spread.df) & (spread.df > 0)
    out = np.full(spread.se.shape, np.nan)
    if usable.any():
        distinct, where = np.unique(spread.df[usable], return_inverse=True)  # it depends on df and alpha only
        out[usable] = _noncentrality(distinct, alpha)[where] * spread.se[usable]
    return out


def projected(spread: Spread, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Standard error and degrees of freedom at `seeds` (P,) seeds, from the spread's variance components."""
    seeds = np.asarray(seeds, dtype=float)
    return np.sqrt(spread.per_seed / seeds + spread.fixed), seeds - 1


def seeds_needed(spread: Spread, margin: np.ndarray, alpha: float) -> np.ndarray:
    """The fewest seeds that detect a gap of +-margin with power 0.8 (NaN where none can, or nothing is known)."""
    margin = np.broadcast_to(np.asarray(margin, dtype=float), spread.se.shape)
    known = np.isfinite(spread.per_seed) & np.isfinite(margin) & (margin > 0) & (spread.se > 0)
    with np.errstate(divide="ignore", invalid="ignore"):  # no fixed part: endless seeds decide any margin
        limit = stats.norm.sf(stats.norm.isf(alpha / 2) - margin / np.sqrt(spread.fixed))  # power, endless seeds
    reachable = known & (limit >= POWER)

    def enough(seeds: np.ndarray) -> np.ndarray:
        se, df = projected(spread, seeds)
        return power(margin, se, df, alpha) >= POWER

    low = np.ones(spread.se.shape)  # not enough: one seed decides nothing
    high = np.full(spread.se.shape, 2.0)
    while True:  # doubling: stops at the first power of two with enough seeds (or at MAX_SEEDS)
        short = reachable & ~enough(high) & (high < MAX_SEEDS)
        if not short.any():
            break
        low, high = np.where(short, high, low), np.where(short, high * 2, high)
    while ((high - low) > 1).any():
        middle = np.floor((low + high) / 2)
        ok = enough(np.maximum(middle, 2.0))
        high, low = np.where(ok, middle, high), np.where(ok, low, middle)
    return np.where(reachable & enough(high), high, np.nan)
