"""Statistics for tables: mean, std, 95% t-interval over seeds, and direction-aware ranks.

Directions come from the metric declarations (`attnbench.metrics.metric_direction`), never from names."""
from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from attnbench.metrics import Direction, metric_direction

__all__ = ["Direction", "metric_direction", "rank", "summarize", "t_quantile_975"]


def _t_density(x: np.ndarray, df: int) -> np.ndarray:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))


def _t_cdf_upper_half(x: float, df: int, points: int = 4001) -> float:
    """P(0 < T < x) by Simpson's rule on the Student-t density."""
    grid = np.linspace(0.0, x, points)
    f = _t_density(grid, df)
    h = x / (points - 1)
    return float(h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()))


@functools.lru_cache(maxsize=None)
def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (bisection on its CDF)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    lo, hi = 0.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf_upper_half(mid, df) < 0.475 else (lo, mid)
    return (lo + hi) / 2


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
