"""Statistics for tables: mean, std, 95% t-interval over seeds, and direction-aware ranks.

Directions come from the metric declarations (`attnbench.metrics.metric_direction`), never from names."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from attnbench.metrics import Direction, metric_direction

__all__ = ["Direction", "metric_direction", "rank", "summarize", "t_quantile_975"]


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (scipy.stats.t)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    return float(scipy_stats.t.ppf(0.975, df))


def summarize(values: Iterable[float], interval_from: int = 3) -> dict[str, float]:
    """mean, sample std (ddof=1; NaN for one value), n, and the 95% t-interval (NaN unless n >= interval_from).

    The tables of means show intervals from 3 seeds; paired and published comparisons from 2."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = len(x)
    out = {"mean": float("nan"), "std": float("nan"), "n": n, "ci_low": float("nan"), "ci_high": float("nan")}
    if n == 0:
        return out
    out["mean"] = float(x.mean())
    if n >= 2:
        out["std"] = float(x.std(ddof=1))
    if n >= max(2, interval_from):
        half = t_quantile_975(n - 1) * out["std"] / math.sqrt(n)
        out["ci_low"], out["ci_high"] = out["mean"] - half, out["mean"] + half
    return out


def rank(values: pd.Series, direction: Direction) -> pd.Series:
    """Rank 1 = best; ties share the best rank; NaN (missing) stays unranked."""
    return values.rank(method="min", ascending=direction == "min", na_option="keep")
