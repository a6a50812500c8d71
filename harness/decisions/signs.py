"""Verdicts of timing checks: two calls timed in alternation, pair after pair (`attnbench.timing.time_alternating`),
each pair's ratio r = the other's time / this one's (> 1: this one was faster), judged in the engine's vocabulary.

Per check, two sign tests (exact binomial, scipy; ties dropped), corrected over the family of checks by the same
method as every other verdict (`attnbench.decisions.corrections`):
- the difference: two-sided sign test of median r = 1 (p); "ahead" (this one faster) or "behind" by the side most
  pairs fall on, where the adjusted p is below alpha;
- the equivalence within a relative margin m: two one-sided sign tests that the median lies above 1 / (1 + m) and
  below 1 + m (the pairs above 1 / (1 + m), and the pairs below 1 + m, are more than half beyond chance), combined
  as min(1, 2 x the larger p) as `attnbench.decisions.verdicts` combines its two one-sided tests; "equivalent"
  where its adjusted value is below alpha (needs each pair's ratio; counts alone give no equivalence);
- otherwise "undecided".
Consecutive pairs share the machine's state, so these read as a check on the direction, not an exact p.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from attnbench.decisions.corrections import Correction, adjust, check_correction
from attnbench.decisions.verdicts import AHEAD, BEHIND, EQUIVALENT, UNDECIDED


def sign_p(faster: int, slower: int) -> float:
    """Exact two-sided sign test p of `faster` pairs against `slower` (NaN without a pair that is not a tie)."""
    n = int(faster) + int(slower)
    return float(stats.binomtest(int(faster), n, 0.5).pvalue) if n else float("nan")


def equivalence_p(ratios: np.ndarray, margin: float) -> float:
    """min(1, 2 x the larger one-sided sign-test p) that the median ratio lies in (1 / (1 + margin), 1 + margin);
    NaN without ratios or a margin."""
    ratios = np.asarray(ratios, dtype=float)
    if ratios.size == 0 or not np.isfinite(margin) or margin <= 0:
        return float("nan")
    low, high = 1.0 / (1.0 + margin), 1.0 + margin
    above_low, below_low = int((ratios > low).sum()), int((ratios < low).sum())
    below_high, above_high = int((ratios < high).sum()), int((ratios > high).sum())
    p_low = stats.binomtest(above_low, above_low + below_low, 0.5, alternative="greater").pvalue
    p_high = stats.binomtest(below_high, below_high + above_high, 0.5, alternative="greater").pvalue
    return float(min(1.0, 2 * max(p_low, p_high)))


def timing_verdicts(
    faster: np.ndarray,
    slower: np.ndarray,
    ratios: list[np.ndarray | None],
    margin: float,
    *,
    alpha: float = 0.05,
    correction: Correction = "holm",
) -> dict[str, np.ndarray]:
    """Per check of a family (counts of pairs where this one was faster / slower, and each pair's ratio where
    stored): p, p_adjusted, the equivalence test's adjusted value and the verdict (module docstring)."""
    check_correction(correction)
    faster, slower = np.asarray(faster, dtype=int), np.asarray(slower, dtype=int)
    p = np.array([sign_p(f, s) for f, s in zip(faster, slower)])
    q = np.array([equivalence_p(r, margin) if r is not None else np.nan for r in ratios])
    p_adjusted, q_adjusted = adjust(p, correction), adjust(q, correction)
    verdict = np.where(
        q_adjusted < alpha,
        EQUIVALENT,
        np.where(p_adjusted < alpha, np.where(faster > slower, AHEAD, BEHIND), UNDECIDED),
    )
    return {"p": p, "p_adjusted": p_adjusted, "q_adjusted": q_adjusted, "verdict": verdict}
