"""Multiple-comparison corrections over a family of pairs (one task, one metric), and the interval level each
pair's verdict is read at.

`adjust(p, method)`: statsmodels' `multipletests` (Holm's step-down for the family-wise error, Benjamini-Hochberg
for the false discovery rate, or none); NaN p-values (pairs with no test) are left out of the family and stay NaN.

`levels(p, method, alpha)`: the per-pair significance level alpha_i such that the pair's two-sided (1 - alpha_i)
interval excludes 0 exactly when its adjusted p-value is below alpha: alpha_i = alpha * p_i / p~_i, with p~_i the
adjusted p-value before the cap at 1 (Holm: max_{j<=i} (m - j + 1) p_(j); BH: min_{j>=i} m p_(j) / j). For Holm
this is the step-down level the pair was tested at (alpha / m for the smallest p, at most alpha / (m - i + 1));
intervals and verdicts then never disagree.
"""

from __future__ import annotations

import gc
from typing import Literal

import numpy as np
from statsmodels.stats.multitest import multipletests

from attnbench.errors import ConfigError

Correction = Literal["holm", "bh", "none"]
CORRECTIONS: dict[str, str] = {"holm": "holm", "bh": "fdr_bh"}  # ours -> statsmodels' method names


def check_correction(correction: str) -> None:
    """Refuse a correction this engine does not know, naming the ones it does."""
    if correction not in ("holm", "bh", "none"):
        raise ConfigError(f"correction={correction!r}; use 'holm' (family-wise), 'bh' (false discovery rate) or 'none'")


def adjust(p: np.ndarray, correction: Correction) -> np.ndarray:
    """Adjusted p-values of a family (NaN entries are not tested and stay NaN)."""
    check_correction(correction)
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    tested = np.isfinite(p)
    if not tested.any():
        return out
    if correction == "none":
        out[tested] = p[tested]
        return out
    gc.freeze()  # multipletests' Holm runs gc.collect(): over a frozen heap it costs microseconds, not 0.15 s
    try:
        out[tested] = multipletests(p[tested], method=CORRECTIONS[correction])[1]
    finally:
        gc.unfreeze()
    return out


def uncapped(p: np.ndarray, correction: Correction) -> np.ndarray:
    """The adjusted p-values before their cap at 1 (finite entries of `p` only; NaN elsewhere)."""
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    m = len(tested)
    if m == 0 or correction == "none":
        out[tested] = p[tested]
        return out
    order = tested[np.argsort(p[tested], kind="stable")]
    ranked = p[order]
    if correction == "holm":
        stepped = np.maximum.accumulate((m - np.arange(m)) * ranked)
    else:
        stepped = np.minimum.accumulate((m * ranked / np.arange(1, m + 1))[::-1])[::-1]
    out[order] = stepped
    return out


def levels(p: np.ndarray, correction: Correction, alpha: float) -> np.ndarray:
    """Per pair, the level alpha_i its interval is drawn at (module docstring); NaN where p is NaN."""
    p = np.asarray(p, dtype=float)
    tilde = uncapped(p, correction)
    finite = np.isfinite(p)
    m = int(finite.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        level = np.where(tilde > 0, alpha * p / tilde, alpha / max(m, 1))  # p = 0: the strictest level of the family
    return np.where(finite, np.minimum(level, alpha), np.nan)


def planning_level(tested: int, correction: Correction, alpha: float) -> float:
    """The level a pair must pass in the worst case (alpha / m under a correction, alpha without): what the minimum
    detectable effect and the seeds needed are computed at."""
    return alpha if correction == "none" else alpha / max(tested, 1)
