"""Per-example outcomes of a stored cell: the numbers, one per test example, whose mean is one of its metrics.

Two stored forms are read (`attnbench.predictions`):
- details["outcomes"][metric]: any measurement's per-example outcomes (`encode_outcomes`), e.g. a recall row's
  accuracy over its answers or a language-model block's bits per byte;
- details["predictions"]: a classifier's per-example probabilities, from which accuracy (0/1 correct), nll
  (-log p of the label, clipped as `attnbench.metrics` clips) and brier follow.
Metrics that are not a mean over examples (ECE, macro-F1, ...) have no outcomes: the engine uses their seeds only.
Outcomes whose mean is not the stored metric (another split, a rounding beyond float16's) are not used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnbench.metrics import NLL_CLIP
from attnbench.predictions import Predictions, decode_outcomes, decode_predictions

AGREEMENT = 2e-3  # |mean of outcomes - metric| allowed, relative to max(1, |metric|): float16 probabilities


def from_predictions(pred: Predictions, metric: str) -> np.ndarray | None:
    """Per-example accuracy, nll or brier of stored classifier predictions (None for any other metric)."""
    rows = np.arange(len(pred.labels))
    if metric == "accuracy":
        return pred.correct.astype(float)
    if metric == "nll":
        return -np.log(np.clip(pred.probs[rows, pred.labels], NLL_CLIP, 1.0))
    if metric == "brier":
        onehot = np.zeros_like(pred.probs)
        onehot[rows, pred.labels] = 1.0
        squared = ((pred.probs - onehot) ** 2).sum(axis=1)
        return squared / 2 if pred.probs.shape[1] == 2 else squared
    return None


def cell_outcomes(details: Any, metric: str, value: float) -> np.ndarray | None:
    """The per-example outcomes of `metric` a cell stored (None where it stored none, or they do not average to
    `value`)."""
    if not isinstance(details, dict):
        return None
    found = None
    stored = (details.get("outcomes") or {}).get(metric) if isinstance(details.get("outcomes"), dict) else None
    try:
        if stored is not None:
            found = decode_outcomes(stored)
        elif details.get("predictions"):
            found = from_predictions(decode_predictions(details["predictions"]), metric)
    except (ValueError, KeyError, TypeError):
        return None
    if found is None or found.size < 2 or not np.all(np.isfinite(found)):
        return None
    if abs(float(found.mean()) - value) > AGREEMENT * max(1.0, abs(value)):
        return None
    return found
