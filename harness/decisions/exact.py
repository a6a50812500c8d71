"""Exact metrics (`MetricInfo.exact`: a count the code computes, such as the bytes a decoding state holds or a
parameter count): no sampling error, so no interval and no test.

Standings order them by value, ties sharing a rank; the rank is known, so its confidence set is the rank alone and
the best set is the labels at rank 1. A pair's difference is exact: "ahead" / "behind" (in the metric's direction)
where the values differ, "equivalent" where they are equal, whatever the margin; "undecided" only where the pair
has no seed in common. Values that agree to SIGNIFICANT digits are equal: a mean over seeds of one count may miss
it in the last bit.
"""

from __future__ import annotations

import numpy as np

from attnbench.decisions.verdicts import AHEAD, BEHIND, EQUIVALENT, UNDECIDED

SIGNIFICANT = 12
EXACT = "exact"  # the `variance` of an exact metric's rows: there is none


def exact_values(values: np.ndarray) -> np.ndarray:
    """Values rounded to SIGNIFICANT digits, so that equal counts compare equal (NaN stays NaN)."""
    values = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        digits = SIGNIFICANT - 1 - np.floor(np.log10(np.abs(values)))
    digits = np.where(np.isfinite(digits), digits, 0).astype(int)
    return np.array([round(float(v), int(d)) for v, d in zip(values, digits)]).reshape(values.shape)


def exact_decisions(a_means: np.ndarray, b_means: np.ndarray, higher_is_better: bool) -> dict[str, np.ndarray]:
    """Per pair, what `verdicts.decide` gives a measured metric, for counted values: the difference a - b (NaN
    without a seed in common), its verdict, no p and no interval (NaN), and margin, mde 0 and one seed needed."""
    a, b = exact_values(a_means), exact_values(b_means)
    estimate = np.asarray(a_means, dtype=float) - np.asarray(b_means, dtype=float)
    better = (a > b) == higher_is_better
    verdict = np.where(np.isnan(estimate), UNDECIDED, np.where(a == b, EQUIVALENT, np.where(better, AHEAD, BEHIND)))
    nan, zero = np.full(len(estimate), np.nan), np.zeros(len(estimate))
    return {
        "estimate": np.where(a == b, 0.0, estimate),
        "verdict": verdict,
        "p": nan,
        "p_adjusted": nan,
        "low": nan,
        "high": nan,
        "level": nan,
        "margin": zero,
        "mde": zero,
        "seeds_needed": np.where(np.isnan(estimate), np.nan, 1.0),
    }
