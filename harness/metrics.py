"""Classification and calibration metrics: pure functions of probabilities (N, C) and labels (N,).

Contract: `expected_calibration_error(probs, labels, n_bins=15) -> float`. Inputs may be numpy
arrays or torch tensors; rows of `probs` are class probabilities, `labels` integer classes.
Accuracy, F1, MCC, balanced accuracy, ROC-AUC, average precision and Brier are scikit-learn's
(`sklearn.metrics`); NLL and the calibration errors, which it lacks or defines differently, are here.
Conventions:
- macro-F1 and balanced accuracy average over the classes present in labels or predictions
  (F1) / in labels (balanced accuracy); an undefined per-class F1 counts as 0.
- MCC is the multi-class (Gorodkin) form; 0 when undefined.
- ROC-AUC and PR-AUC (average precision) are for binary tasks, on the probability of class 1.
- NLL clips the true-class probability at float64 eps (as scikit-learn does).
- Brier is the squared error to the one-hot label summed over classes (Brier 1950, range [0, 2]);
  for two classes it is halved, i.e. the usual (p_1 - y)^2 in [0, 1] (scikit-learn's convention).
- ECE bins the top-1 confidence into equal-width bins (lower, upper], the first bin also holding
  0; the equal-mass variant puts its bin edges at confidence quantiles (bins of nearly equal
  count; tied confidences share a bin).

Records: every metric a measurement reports is declared once with `register_metric(pattern, direction,
description, ...)`, beside the code that computes it, as one `MetricInfo` (lm-eval's MetricSpec): which way is
better ("max", "min", None: not ranked), its range (`bounds`), the default equivalence margin the inference
engine (`attnbench.decisions`) uses (in the metric's units, or a fraction of the compared-against value where
`margin_relative`), whether it is a headline metric and compared in pairs, its display format, and whether it is
`exact`: a count the code computes (the bytes a decoding state holds, a parameter count), with no sampling error,
which the engine orders by value and never tests. The reports read `metric_info(name)` and never guess from names.
A pattern is an exact name or a glob over full names (e.g. "*_tokens_per_s@*"); exact names win. A record is a
plain frozen dataclass: `as_dict()` / `MetricInfo.from_dict` carry it through JSON.
"""

from __future__ import annotations

import builtins
import dataclasses
import fnmatch
import math
import warnings
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
from sklearn import metrics as skm

NLL_CLIP = float(np.finfo(np.float64).eps)  # where sklearn.metrics.log_loss clips

Direction = Literal["max", "min"]


@dataclasses.dataclass(frozen=True)
class MetricInfo:
    """A declared metric (or glob of metric names): which way is better, its range, its equivalence margin, how it
    is shown, and what it is."""

    pattern: str
    direction: Direction | None
    description: str
    timed: bool = False  # a wall-clock figure: the tables rank it only where a timing check backs it
    bounds: tuple[float | None, float | None] = (None, None)  # the values it can take (None: unbounded that side)
    margin: float | None = None  # equivalence margin: differences within +-margin do not matter (None: not judged)
    margin_relative: bool = False  # margin is a fraction of the compared-against label's mean (times, sizes)
    headline: bool = False  # one of the metrics a task's results are summarised by
    paired: bool = False  # shown in the paired-comparison table
    format: str = ".3f"  # a format() spec for its values
    exact: bool = False  # a count the code computes exactly: no sampling error (ordered by value, never tested)

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-able values (bounds as a list)."""
        return dataclasses.asdict(self) | {"bounds": list(self.bounds)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricInfo:
        """The record `as_dict` wrote (unknown keys refused, missing ones at their defaults)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"metric record has unknown keys {unknown}; known: {sorted(known)}")
        bounds = data.get("bounds", (None, None))
        return cls(**(data | {"bounds": (bounds[0], bounds[1])}))


METRICS: dict[str, MetricInfo] = {}


def register_metric(
    pattern: str,
    direction: Direction | None,
    description: str,
    *,
    timed: bool = False,
    bounds: tuple[float | None, float | None] = (None, None),
    margin: float | None = None,
    margin_relative: bool = False,
    headline: bool = False,
    paired: bool = False,
    format: str = ".3f",
    exact: bool = False,
) -> None:
    """Declare a metric name (or a glob over names) and whether higher ("max") or lower ("min") is better;
    `timed`: it is a wall-clock figure (seconds, latency, throughput), which swings with machine load, so the
    per-task tables show it without a rank (the efficiency section ranks times through its paired timing check).
    `bounds` (low, high): the range its values lie in (intervals are kept inside it); `margin`: the default
    equivalence margin (a fraction of the other label's mean where `margin_relative`); `headline`: a task's
    summary metric; `paired`: shown in the paired comparisons; `format`: a format() spec for display; `exact`: a
    count the code computes (bytes, parameters), the same wherever it runs, so the engine (`attnbench.decisions`)
    orders it by value (ties share a rank) and draws no interval and runs no test on it."""
    if direction not in ("max", "min", None):
        raise ValueError(f"direction={direction!r} for metric {pattern!r} must be 'max', 'min' or None")
    low, high = bounds
    if low is not None and high is not None and not low < high:
        raise ValueError(f"bounds={bounds!r} for metric {pattern!r} must be (low, high) with low < high")
    if margin is not None and not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin={margin!r} for metric {pattern!r} must be a non-negative number or None")
    if exact and timed:
        raise ValueError(f"metric {pattern!r} cannot be both timed (measured) and exact (counted); declare one")
    format_spec = format
    try:
        builtins.format(0.5, format_spec)
    except ValueError:
        raise ValueError(f"format={format_spec!r} for metric {pattern!r} is not a format() spec, e.g. '.3f'") from None
    known = METRICS.get(pattern)
    if known is not None and known.direction != direction:
        raise ValueError(f"metric {pattern!r} is already declared with direction {known.direction!r}")
    METRICS[pattern] = MetricInfo(
        pattern,
        direction,
        description,
        timed,
        (low, high),
        margin,
        margin_relative,
        headline,
        paired,
        format_spec,
        exact,
    )


def declared_records() -> dict[str, dict[str, Any]]:
    """Every record declared so far, by pattern, as JSON: what a run stores in run.json ("metrics")."""
    return {pattern: info.as_dict() for pattern, info in METRICS.items()}


def adopt_records(records: Any) -> bool:
    """Declare the records a run stored (run.json's "metrics", by pattern) that this process has not declared, so
    that a report knows its metrics without importing the measurements (nor torch); False when `records` is not
    such a mapping (a run written before runs stored them), and nothing is declared."""
    if not isinstance(records, dict) or not all(isinstance(r, dict) for r in records.values()):
        return False
    for pattern, data in records.items():
        if pattern not in METRICS:
            METRICS[pattern] = MetricInfo.from_dict(data)
    return True


def records_predate_fields(records: Any) -> bool:
    """Whether some record a run stored (run.json "metrics") lacks a field this version's records have: it was
    stored before the field was added (e.g. `exact`), and took its default when adopted, so the caller should
    declare the built-in measurements' own records (which know it) over the stored ones."""
    fields = {f.name for f in dataclasses.fields(MetricInfo)}
    return isinstance(records, dict) and any(isinstance(r, dict) and not fields <= set(r) for r in records.values())


def metric_exact(name: str) -> bool:
    """Whether the metric is declared a count the code computes exactly (`register_metric(..., exact=True)`)."""
    info = metric_info(name)
    return bool(info is not None and info.exact)


def metric_timed(name: str) -> bool:
    """Whether the metric is declared a wall-clock figure (`register_metric(..., timed=True)`)."""
    info = metric_info(name)
    return bool(info is not None and info.timed)


def metric_info(name: str) -> MetricInfo | None:
    """The declaration that covers `name`, or None: its exact name, else the most specific glob that matches (the
    most characters that are not wildcards: 'decode_ms_per_token@*' before '*_ms@*'), whatever the order the modules
    declaring them were imported in. Only what has been declared so far: a measurement's metrics are declared when
    its module is imported (`attnbench.measurements.measurement_names()` imports every one), as the report and the
    suite do first."""
    if name in METRICS:
        return METRICS[name]
    matches = [m for m in METRICS.values() if fnmatch.fnmatchcase(name, m.pattern)]
    return max(matches, key=lambda m: len(m.pattern.replace("*", "").replace("?", "")), default=None)


JUDGED_FIRST = ("bits_per_byte", "accuracy")  # a language model is judged by bits per byte, any other by accuracy


def headline_metric(names: Iterable[str]) -> str | None:
    """The metric some results are judged by: the first of JUDGED_FIRST they have, else their first (sorted) ranked
    headline metric, else their first ranked one; never a wall-clock figure; None where none is ranked."""
    ranked = sorted(
        n for n in set(names) if (i := metric_info(n)) is not None and i.direction is not None and not i.timed
    )
    first = [n for n in JUDGED_FIRST if n in ranked]
    headline = [n for n in ranked if metric_info(n).headline]
    return (first or headline or ranked or [None])[0]


def metric_direction(name: str) -> Direction | None:
    """'max' if higher is better, 'min' if lower is better, None if the metric is undeclared or not ranked."""
    info = metric_info(name)
    return info.direction if info is not None else None


def _as_arrays(probs: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated float64 probabilities (N, C) and int64 labels (N,) from numpy or torch inputs."""
    p = np.asarray(probs.detach().cpu().numpy() if hasattr(probs, "detach") else probs, dtype=np.float64)
    y = np.asarray(labels.detach().cpu().numpy() if hasattr(labels, "detach") else labels)
    if p.ndim != 2 or y.ndim != 1 or p.shape[0] != y.shape[0] or p.shape[0] == 0:
        raise ValueError(f"expected probs (N, C) and labels (N,) with N > 0, got shapes {p.shape} and {y.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError("probs contain NaN or infinite values; check the model's outputs")
    y = y.astype(np.int64)
    if y.min() < 0 or y.max() >= p.shape[1]:
        raise ValueError(f"labels must lie in [0, {p.shape[1]}), got range [{y.min()}, {y.max()}]")
    return p, y


def _predicted(p: np.ndarray) -> np.ndarray:
    return p.argmax(axis=1)


def accuracy(probs: Any, labels: Any) -> float:
    """Fraction of rows whose arg-max class is the label."""
    p, y = _as_arrays(probs, labels)
    return float(skm.accuracy_score(y, _predicted(p)))


def macro_f1(probs: Any, labels: Any) -> float:
    """Unweighted mean of per-class F1 over classes present in labels or predictions."""
    p, y = _as_arrays(probs, labels)
    return float(skm.f1_score(y, _predicted(p), average="macro", zero_division=0))


def weighted_f1(probs: Any, labels: Any) -> float:
    """Per-class F1 averaged with weights = class support in the labels."""
    p, y = _as_arrays(probs, labels)
    return float(skm.f1_score(y, _predicted(p), average="weighted", zero_division=0))


def matthews_corrcoef(probs: Any, labels: Any) -> float:
    """Multi-class Matthews correlation coefficient (Gorodkin 2004) of arg-max predictions."""
    p, y = _as_arrays(probs, labels)
    return float(skm.matthews_corrcoef(y, _predicted(p)))


def balanced_accuracy(probs: Any, labels: Any) -> float:
    """Mean per-class recall over the classes present in the labels."""
    p, y = _as_arrays(probs, labels)
    with warnings.catch_warnings():  # a predicted class absent from the labels is expected, not news
        warnings.simplefilter("ignore", UserWarning)
        return float(skm.balanced_accuracy_score(y, _predicted(p)))


def _binary_scores(probs: Any, labels: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    p, y = _as_arrays(probs, labels)
    if p.shape[1] != 2:
        raise ValueError(f"{what} is defined here for binary tasks only, got {p.shape[1]} classes")
    if y.min() == y.max():
        raise ValueError(f"{what} needs both classes among the labels, got only class {y[0]}")
    return p[:, 1], y


def roc_auc(probs: Any, labels: Any) -> float:
    """Binary ROC-AUC of P(class 1) (tied scores count one half)."""
    scores, y = _binary_scores(probs, labels, "ROC-AUC")
    return float(skm.roc_auc_score(y, scores))


def average_precision(probs: Any, labels: Any) -> float:
    """Binary PR-AUC as average precision: sum over thresholds of (recall step) x precision."""
    scores, y = _binary_scores(probs, labels, "PR-AUC")
    return float(skm.average_precision_score(y, scores))


def log_loss(probs: Any, labels: Any) -> float:
    """Mean negative log-probability of the true class (rows renormalised, clipped at NLL_CLIP)."""
    p, y = _as_arrays(probs, labels)
    p = p / p.sum(axis=1, keepdims=True)  # float32 softmax rows miss 1 by more than sklearn's check allows
    return float(skm.log_loss(y, p, labels=list(range(p.shape[1]))))


def brier_score(probs: Any, labels: Any) -> float:
    """Squared error to the one-hot label summed over classes, halved for two classes (see module doc)."""
    p, y = _as_arrays(probs, labels)
    if p.shape[1] == 2:
        return float(skm.brier_score_loss(y, p[:, 1], pos_label=1))
    return float(skm.brier_score_loss(y, p, labels=list(range(p.shape[1]))))


def _confidence_correct(probs: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    p, y = _as_arrays(probs, labels)
    return p.max(axis=1), (p.argmax(axis=1) == y).astype(np.float64)


def _equal_width_bin(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index of each confidence: bin b holds (b/n, (b+1)/n], bin 0 also holds 0."""
    if n_bins < 1:
        raise ValueError(f"n_bins={n_bins} must be at least 1")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.clip(np.searchsorted(edges[1:-1], confidence, side="left"), 0, n_bins - 1)


def _gap(confidence: np.ndarray, correct: np.ndarray, bins: np.ndarray, n_bins: int) -> float:
    """sum_b (n_b / N) |accuracy_b - confidence_b| for the given bin assignment."""
    counts = np.bincount(bins, minlength=n_bins)
    conf_sum = np.bincount(bins, weights=confidence, minlength=n_bins)
    correct_sum = np.bincount(bins, weights=correct, minlength=n_bins)
    return float(np.abs(correct_sum - conf_sum).sum() / counts.sum())


def expected_calibration_error(probs: Any, labels: Any, n_bins: int = 15) -> float:
    """ECE over `n_bins` equal-width bins of top-1 confidence."""
    confidence, correct = _confidence_correct(probs, labels)
    return _gap(confidence, correct, _equal_width_bin(confidence, n_bins), n_bins)


def equal_mass_calibration_error(probs: Any, labels: Any, n_bins: int = 15) -> float:
    """ECE over `n_bins` bins of (nearly) equal count: edges at confidence quantiles, ties share a bin."""
    if n_bins < 1:
        raise ValueError(f"n_bins={n_bins} must be at least 1")
    confidence, correct = _confidence_correct(probs, labels)
    n = len(confidence)
    ordered = np.sort(confidence)
    edges = ordered[np.arange(1, n_bins) * n // n_bins - 1] if n >= n_bins else ordered[:-1]
    bins = np.searchsorted(edges, confidence, side="left")
    return _gap(confidence, correct, bins, len(edges) + 1)


def reliability_bins(probs: Any, labels: Any, n_bins: int = 15) -> list[dict[str, float | int | None]]:
    """Per equal-width bin: lower, upper, count, mean confidence and accuracy (None when empty)."""
    confidence, correct = _confidence_correct(probs, labels)
    bins = _equal_width_bin(confidence, n_bins)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    rows = []
    for b in range(n_bins):
        inside = bins == b
        count = int(inside.sum())
        rows.append(
            {
                "lower": float(edges[b]),
                "upper": float(edges[b + 1]),
                "count": count,
                "confidence": float(confidence[inside].mean()) if count else None,
                "accuracy": float(correct[inside].mean()) if count else None,
            }
        )
    return rows


def classification_metrics(probs: Any, labels: Any, n_bins: int = 15) -> dict[str, float]:
    """All metrics as a flat dict; roc_auc and pr_auc only for binary tasks with both classes present."""
    p, y = _as_arrays(probs, labels)
    metrics = {
        "accuracy": accuracy(p, y),
        "macro_f1": macro_f1(p, y),
        "weighted_f1": weighted_f1(p, y),
        "mcc": matthews_corrcoef(p, y),
        "balanced_accuracy": balanced_accuracy(p, y),
        "nll": log_loss(p, y),
        "brier": brier_score(p, y),
        "ece": expected_calibration_error(p, y, n_bins),
        "ece_equal_mass": equal_mass_calibration_error(p, y, n_bins),
    }
    if p.shape[1] == 2 and y.min() != y.max():
        metrics["roc_auc"] = roc_auc(p, y)
        metrics["pr_auc"] = average_precision(p, y)
    return metrics


PROBABILITY = {"bounds": (0.0, 1.0), "margin": 0.01}  # a share of rows: a point (0.01) is the margin

for _name, _direction, _text, _record in (
    ("accuracy", "max", "fraction of rows whose arg-max class is the label", PROBABILITY | {"headline": True}),
    ("macro_f1", "max", "unweighted mean of per-class F1", PROBABILITY),
    ("weighted_f1", "max", "per-class F1 weighted by label support", PROBABILITY),
    ("mcc", "max", "multi-class Matthews correlation coefficient", {"bounds": (-1.0, 1.0), "margin": 0.01}),
    ("balanced_accuracy", "max", "mean per-class recall", PROBABILITY),
    ("roc_auc", "max", "binary ROC-AUC of P(class 1)", PROBABILITY),
    ("pr_auc", "max", "binary average precision of P(class 1)", PROBABILITY),
    ("nll", "min", "mean negative log-probability of the true class", {"bounds": (0.0, None), "margin": 0.01}),
    ("brier", "min", "Brier score (halved for two classes)", {"bounds": (0.0, 2.0), "margin": 0.01}),
    ("ece", "min", "expected calibration error, equal-width bins", PROBABILITY),
    ("ece_equal_mass", "min", "expected calibration error, equal-mass bins", PROBABILITY),
):
    register_metric(_name, _direction, _text, paired=_name in ("accuracy", "macro_f1", "nll", "ece"), **_record)
