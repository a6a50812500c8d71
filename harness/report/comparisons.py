"""Paired comparisons of two models on the same test examples and seeds: the statistics (scipy, numpy).

- Over seeds: the mean of the per-seed differences a - b with a 95% Student-t interval
  (`mean_difference_interval`, scipy's t quantile); it measures how much the gap moves with the training seed.
- Over test examples, per seed: exact McNemar for accuracy (`mcnemar_exact`: scipy's exact binomial
  test on the discordant pairs), a paired bootstrap for the other metrics (`paired_bootstrap_p`: both
  models scored on the same resampled rows). scipy.stats.bootstrap gives intervals, not this
  p-value, and rescoring 2,000 resamples one by one through it would cost ~100x the matrix form here.
- Across seeds: every seed is tested on the same examples, so the per-seed p-values are dependent
  and Fisher's or Stouffer's rules (which assume independence) would overstate the evidence. They
  are combined by twice their arithmetic mean, capped at 1, which is a valid p-value under any
  dependence (Rüschendorf 1982; Vovk & Wang 2020, "Combining p-values via averaging"); one seed's
  p-value is kept as it is (`combine_p_values`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from scipy import stats as scipy_stats

from attnbench.metrics import NLL_CLIP
from attnbench.predictions import Predictions
from attnbench.report.stats import summarize

ResampledMetric = Callable[[Predictions, np.ndarray], np.ndarray]  # (predictions, weights (B, N)) -> (B,)


def mean_difference_interval(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Mean of a_s - b_s over seeds s (also std, n), and its 95% t-interval (NaN with fewer than 2 seeds)."""
    return summarize(np.asarray(a, dtype=float) - np.asarray(b, dtype=float), interval_from=2)


def mcnemar_exact(correct_a: np.ndarray, correct_b: np.ndarray) -> float:
    """Two-sided exact McNemar p-value: binomial(b + c, 1/2) test on the discordant pairs."""
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"the two models were scored on different rows: shapes {a.shape} and {b.shape}")
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    if only_a + only_b == 0:
        return 1.0
    return float(scipy_stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def resampled_accuracy(pred: Predictions, weights: np.ndarray) -> np.ndarray:
    """Accuracy on each resample (rows of `weights`: how often each example is drawn)."""
    return weights @ pred.correct.astype(float) / len(pred.labels)


def resampled_nll(pred: Predictions, weights: np.ndarray) -> np.ndarray:
    """Mean negative log-probability of the true class on each resample (clipped like attnbench.metrics)."""
    true = pred.probs[np.arange(len(pred.labels)), pred.labels]
    return weights @ -np.log(np.clip(true, NLL_CLIP, 1.0)) / len(pred.labels)


def resampled_ece(pred: Predictions, weights: np.ndarray, n_bins: int = 15) -> np.ndarray:
    """Equal-width-bin ECE (as attnbench.metrics.expected_calibration_error) on each resample."""
    confidence = pred.probs.max(axis=1)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = np.clip(np.searchsorted(edges[1:-1], confidence, side="left"), 0, n_bins - 1)
    gaps = np.zeros((len(confidence), n_bins))
    gaps[np.arange(len(confidence)), bins] = pred.correct - confidence
    return np.abs(weights @ gaps).sum(axis=1) / len(confidence)


def resampled_macro_f1(pred: Predictions, weights: np.ndarray) -> np.ndarray:
    """Macro-F1 over the classes present in labels or predictions of each resample (as attnbench.metrics)."""
    num_classes = pred.probs.shape[1]
    f1_sum = np.zeros(weights.shape[0])
    present = np.zeros(weights.shape[0])
    for c in range(num_classes):
        tp = weights @ ((pred.predicted == c) & (pred.labels == c)).astype(float)
        denominator = weights @ ((pred.predicted == c).astype(float) + (pred.labels == c))
        f1_sum += np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)
        present += denominator > 0
    return f1_sum / present


RESAMPLED: dict[str, ResampledMetric] = {
    "accuracy": resampled_accuracy,
    "nll": resampled_nll,
    "ece": resampled_ece,
    "macro_f1": resampled_macro_f1,
}


def bootstrap_weights(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, n) counts of each example in a resample of n rows drawn with replacement."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(float)


CHUNK = 250  # resamples drawn (and scored) at a time
CACHED_VALUES = 10_000_000  # resamples x rows up to which one seed's resamples are kept for the next pair


def _resample_chunks(n: int, resamples: int, seed: int) -> Iterator[np.ndarray]:
    """The resampling weights of `seed`, CHUNK rows at a time (the same draws whether cached or not)."""
    if n * resamples <= CACHED_VALUES:
        yield from _cached_chunks(n, resamples, seed)
        return
    rng = np.random.default_rng(seed)
    for start in range(0, resamples, CHUNK):
        yield bootstrap_weights(n, min(CHUNK, resamples - start), rng)


@functools.lru_cache(maxsize=4)
def _cached_chunks(n: int, resamples: int, seed: int) -> tuple[np.ndarray, ...]:
    """One seed's weights, kept: every pair and metric of a seed is scored on the same resamples."""
    rng = np.random.default_rng(seed)
    return tuple(
        bootstrap_weights(n, min(CHUNK, resamples - start), rng).astype(np.float32)
        for start in range(0, resamples, CHUNK)
    )


def paired_bootstrap_p(
    a: Predictions, b: Predictions, metric: ResampledMetric, *, resamples: int = 2000, seed: int = 0
) -> float:
    """Two-sided paired bootstrap p-value of metric(a) - metric(b) = 0 over the test examples.

    Both models are scored on the same resampled rows; the null distribution is the resampled
    difference shifted to zero mean: p = (1 + #{|d* - d| >= |d|}) / (1 + resamples)
    (Efron & Tibshirani 1993, ch. 16; Davison & Hinkley 1997 for the +1).
    """
    if not np.array_equal(a.labels, b.labels):
        raise ValueError("the two models were scored on different test rows (their stored labels differ)")
    n = len(a.labels)
    full = np.ones((1, n))
    observed = float(metric(a, full)[0] - metric(b, full)[0])
    extreme = 0
    for weights in _resample_chunks(n, resamples, seed):
        d = metric(a, weights) - metric(b, weights)
        extreme += int(np.sum(np.abs(d - observed) >= abs(observed) - 1e-12))
    return (1 + extreme) / (1 + resamples)


def per_example_p(
    metric: str, a: Predictions, b: Predictions, *, resamples: int = 2000, seed: int = 0, n_bins: int = 15
) -> float:
    """The per-seed test: exact McNemar for accuracy, the paired bootstrap for every other metric."""
    if metric == "accuracy":
        if not np.array_equal(a.labels, b.labels):
            raise ValueError("the two models were scored on different test rows (their stored labels differ)")
        return mcnemar_exact(a.correct, b.correct)
    resampled = functools.partial(resampled_ece, n_bins=n_bins) if metric == "ece" else RESAMPLED[metric]
    return paired_bootstrap_p(a, b, resampled, resamples=resamples, seed=seed)


def combine_p_values(p_values: Sequence[float]) -> float:
    """One p-value from per-seed p-values on the same examples: min(1, 2 x mean), valid under any dependence."""
    p = [float(x) for x in p_values if x is not None and math.isfinite(x)]
    if not p:
        return math.nan
    return p[0] if len(p) == 1 else min(1.0, 2.0 * float(np.mean(p)))


def default_pairs(labels: Sequence[str]) -> list[tuple[str, str]]:
    """Every kernel-<map> with its vanilla-<map> twin, then every other label with softmax (a, b: a - b)."""
    present = set(labels)
    pairs = [
        (lab, "vanilla-" + lab[len("kernel-") :])
        for lab in sorted(present)
        if lab.startswith("kernel-") and "vanilla-" + lab[len("kernel-") :] in present
    ]
    if "softmax" in present:
        pairs += [(lab, "softmax") for lab in sorted(present) if lab != "softmax"]
    return pairs
