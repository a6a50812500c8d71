"""Paired statistics against statsmodels / scipy or hand-computed answers; each can fail."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.contingency_tables import mcnemar

from attnbench import metrics
from attnbench.predictions import Predictions, decode_predictions, encode_predictions
from attnbench.report import comparisons
from attnbench.report.comparisons import (
    RESAMPLED,
    bootstrap_weights,
    combine_p_values,
    default_pairs,
    mcnemar_exact,
    mean_difference_interval,
    paired_bootstrap_p,
    per_example_p,
)


def _predictions(probs: np.ndarray, labels: np.ndarray) -> Predictions:
    return Predictions(probs, probs.argmax(axis=1), labels)


def _random_model(rng: np.random.Generator, labels: np.ndarray, skill: float, classes: int = 2) -> Predictions:
    logits = rng.normal(size=(len(labels), classes))
    logits[np.arange(len(labels)), labels] += skill
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return _predictions(probs, labels)


@pytest.mark.parametrize(
    "only_a, only_b, both, neither",
    [(0, 0, 50, 10), (3, 9, 40, 8), (25, 40, 300, 100), (1, 0, 5, 5), (120, 80, 600, 266)],
)
def test_mcnemar_exact_matches_statsmodels(only_a: int, only_b: int, both: int, neither: int) -> None:
    a = np.array([1] * only_a + [0] * only_b + [1] * both + [0] * neither, dtype=bool)
    b = np.array([0] * only_a + [1] * only_b + [1] * both + [0] * neither, dtype=bool)
    table = [[both, only_a], [only_b, neither]]
    assert mcnemar_exact(a, b) == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    "a, b",
    [
        ([0.70, 0.72, 0.75], [0.68, 0.69, 0.74]),
        ([0.5, 0.9], [0.4, 0.6]),
        ([1.0, 2.0, 4.0, 8.0, 3.0], [1.5, 1.0, 5.0, 2.0, 0.0]),
    ],
)
def test_mean_difference_interval_matches_scipy_t(a: list[float], b: list[float]) -> None:
    d = np.subtract(a, b)
    low, high = scipy_stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=scipy_stats.sem(d))
    got = mean_difference_interval(a, b)
    assert got["mean"] == pytest.approx(d.mean())
    assert (got["ci_low"], got["ci_high"]) == pytest.approx((low, high), rel=1e-6)


def test_mean_difference_interval_needs_two_seeds() -> None:
    got = mean_difference_interval([0.7], [0.6])
    assert got["mean"] == pytest.approx(0.1) and math.isnan(got["ci_low"]) and math.isnan(got["ci_high"])


def test_resampled_metrics_equal_the_metrics_on_the_resampled_rows() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, size=300)
    pred = _random_model(rng, labels, 1.0, classes=3)
    full = np.ones((1, len(labels)))
    reference = {
        "accuracy": metrics.accuracy,
        "nll": metrics.log_loss,
        "ece": metrics.expected_calibration_error,
        "macro_f1": metrics.macro_f1,
    }
    index = rng.integers(0, len(labels), size=len(labels))
    weights = np.bincount(index, minlength=len(labels))[None, :].astype(float)
    for name, fn in RESAMPLED.items():
        assert fn(pred, full)[0] == pytest.approx(reference[name](pred.probs, labels), rel=1e-12), name
        assert fn(pred, weights)[0] == pytest.approx(reference[name](pred.probs[index], labels[index]), rel=1e-12), name


def test_bootstrap_p_matches_the_normal_limit_of_a_mean_difference() -> None:
    """For NLL (a mean over examples) the bootstrap difference is ~ N(d, s^2 / n): p = 2 (1 - Phi(|d| / se))."""
    rng = np.random.default_rng(1)
    n = 600
    labels = np.zeros(n, dtype=int)
    true_a = rng.uniform(0.2, 0.6, size=n)
    true_b = true_a * np.exp(rng.normal(0.0, 0.12, size=n))  # stays below 1
    a = _predictions(np.stack([true_a, 1 - true_a], axis=1), labels)
    b = _predictions(np.stack([true_b, 1 - true_b], axis=1), labels)
    d = -np.log(true_a) + np.log(true_b)
    expected = 2 * (1 - scipy_stats.norm.cdf(abs(d.mean()) / (d.std(ddof=0) / math.sqrt(n))))
    got = paired_bootstrap_p(a, b, RESAMPLED["nll"], resamples=20000, seed=3)
    assert 0.02 < expected < 0.5  # a case in the interesting range
    assert got == pytest.approx(expected, abs=0.015)


def test_bootstrap_p_extremes() -> None:
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 2, size=200)
    a = _random_model(rng, labels, 1.5)
    assert paired_bootstrap_p(a, a, RESAMPLED["ece"], resamples=500) == 1.0  # identical models
    better = _predictions(np.where(np.eye(2)[labels] == 1, 0.9, 0.1), labels)
    worse = _predictions(np.where(np.eye(2)[labels] == 1, 0.6, 0.4), labels)
    assert paired_bootstrap_p(better, worse, RESAMPLED["nll"], resamples=999) == pytest.approx(1 / 1000)


def test_bootstrap_weights_are_resamples_of_n_rows() -> None:
    w = bootstrap_weights(50, 40, np.random.default_rng(0))
    assert w.shape == (40, 50) and np.all(w.sum(axis=1) == 50) and np.all(w >= 0)


def test_cached_and_streamed_resamples_give_the_same_p(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(6)
    labels = rng.integers(0, 2, size=300)
    a, b = _random_model(rng, labels, 1.2), _random_model(rng, labels, 1.0)
    cached = paired_bootstrap_p(a, b, RESAMPLED["macro_f1"], resamples=600, seed=1)
    monkeypatch.setattr(comparisons, "CACHED_VALUES", 0)
    assert paired_bootstrap_p(a, b, RESAMPLED["macro_f1"], resamples=600, seed=1) == cached


def test_per_example_p_uses_mcnemar_for_accuracy_and_refuses_other_rows() -> None:
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 2, size=120)
    a, b = _random_model(rng, labels, 2.0), _random_model(rng, labels, 0.5)
    assert per_example_p("accuracy", a, b) == pytest.approx(mcnemar_exact(a.correct, b.correct))
    other = Predictions(b.probs, b.predicted, 1 - labels)
    with pytest.raises(ValueError, match="different test rows"):
        per_example_p("nll", a, other)


def test_combine_p_values_hand_computed() -> None:
    assert combine_p_values([0.01, 0.03, 0.05]) == pytest.approx(0.06)  # 2 x mean
    assert combine_p_values([0.4, 0.9]) == 1.0  # capped
    assert combine_p_values([0.02]) == 0.02  # one seed: its own p-value
    assert math.isnan(combine_p_values([]))


def test_default_pairs() -> None:
    labels = ["kernel-elu", "vanilla-elu", "kernel-cos2", "softmax", "performer", "majority"]
    assert default_pairs(labels) == [
        ("kernel-elu", "vanilla-elu"),
        ("kernel-cos2", "softmax"),
        ("kernel-elu", "softmax"),
        ("majority", "softmax"),
        ("performer", "softmax"),
        ("vanilla-elu", "softmax"),
    ]
    assert default_pairs(["a", "b"]) == []


def test_predictions_round_trip_compactly() -> None:
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 3, size=1066)
    pred = _random_model(rng, labels, 1.0, classes=3)
    stored = encode_predictions(pred.probs, labels)
    back = decode_predictions(stored)
    assert np.array_equal(back.labels, labels) and np.array_equal(back.predicted, pred.probs.argmax(axis=1))
    assert np.allclose(back.probs, pred.probs, rtol=1e-3, atol=1e-4)
    assert len(stored["probs"]) + len(stored["predicted"]) + len(stored["labels"]) <= (3 * 2 + 2) * 1066 * 4 / 3 + 12
    with pytest.raises(ValueError, match="encoding"):
        decode_predictions({"encoding": "json"})
