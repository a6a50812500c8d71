"""Descriptive statistics for tables: mean, sample std and count over seeds.

No interval or verdict is drawn here: every interval, rank claim and verdict of a report comes from the inference
engine (`attnbench.report.inference`). Directions come from the metric records (`attnbench.metrics`), never from
names."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from attnbench.metrics import Direction, metric_direction

__all__ = ["Direction", "metric_direction", "summarize"]


def summarize(values: Iterable[float]) -> dict[str, float]:
    """mean, sample std (ddof=1; NaN for one value) and n of the finite values."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = len(x)
    return {
        "mean": float(x.mean()) if n else float("nan"),
        "std": float(x.std(ddof=1)) if n >= 2 else float("nan"),
        "n": n,
    }
