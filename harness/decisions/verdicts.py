"""Verdicts read off corrected intervals: ahead, behind, equivalent (two one-sided tests), undecided.

Per pair, two tests, each corrected over the family by the same method (`attnbench.decisions.corrections`):
- the difference: two-sided t-test of a - b = 0 (p); "ahead" / "behind" where its adjusted p is below alpha,
  by the sign of a - b in the metric's direction;
- the equivalence: two one-sided tests of a - b <= -margin and a - b >= margin (Schuirmann 1987), read as the
  two-sided interval: q = min(1, 2 max(p_low, p_high)) is below a level exactly when that level's two-sided
  interval lies inside (-margin, +margin). "equivalent" where q's adjusted value is below alpha: the gap is
  within the margin at the corrected level (it may still be detectably non-zero; the estimate says which way).
Equivalence is read first (a gap within the margin is what "the same" means); a pair that is neither is
"undecided". Each pair's interval (low, high) is drawn at the level of the verdict it supports (the difference
test's for ahead/behind, the equivalence test's for equivalent, the stricter of the two for undecided), so the
interval always agrees with the verdict beside it.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from attnbench.decisions.corrections import Correction, adjust, levels

AHEAD, BEHIND, EQUIVALENT, UNDECIDED = "ahead", "behind", "equivalent", "undecided"
VERDICTS = (AHEAD, BEHIND, EQUIVALENT, UNDECIDED)


def difference_p(estimate: np.ndarray, se: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Two-sided t-test p of a - b = 0 (NaN where there is no spread: one seed, coincident seeds)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * stats.t.sf(np.abs(estimate) / se, df)
    return np.where((se > 0) & np.isfinite(se) & np.isfinite(df), p, np.nan)


def equivalence_q(estimate: np.ndarray, se: np.ndarray, df: np.ndarray, margin: np.ndarray) -> np.ndarray:
    """min(1, 2 x the larger one-sided p) of |a - b| < margin (NaN without a margin or a spread)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p_low = stats.t.sf((estimate + margin) / se, df)
        p_high = stats.t.sf((margin - estimate) / se, df)
        q = np.minimum(1.0, 2 * np.maximum(p_low, p_high))
    usable = (se > 0) & np.isfinite(se) & np.isfinite(df) & np.isfinite(margin) & (margin > 0)
    return np.where(usable, q, np.nan)


def decide(
    estimate: np.ndarray,
    se: np.ndarray,
    df: np.ndarray,
    margin: np.ndarray,
    higher_is_better: bool,
    alpha: float,
    correction: Correction,
) -> dict[str, np.ndarray]:
    """Per pair of a family: p, p_adjusted, verdict, and the interval (low, high) at its verdict's level."""
    p = difference_p(estimate, se, df)
    q = equivalence_q(estimate, se, df, margin)
    p_adjusted, q_adjusted = adjust(p, correction), adjust(q, correction)
    p_level, q_level = levels(p, correction, alpha), levels(q, correction, alpha)
    detected = p_adjusted < alpha
    equivalent = q_adjusted < alpha
    better = (estimate > 0) == higher_is_better
    verdict = np.where(equivalent, EQUIVALENT, np.where(detected, np.where(better, AHEAD, BEHIND), UNDECIDED))
    level = np.where(equivalent, q_level, np.where(detected, p_level, np.fmin(p_level, q_level)))
    with np.errstate(invalid="ignore"):
        half = stats.t.isf(level / 2, df) * se
    return {
        "p": p,
        "p_adjusted": p_adjusted,
        "verdict": verdict,
        "low": estimate - half,
        "high": estimate + half,
        "level": 1 - level,
    }
