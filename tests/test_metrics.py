"""Every metric against a hand count or naive loop (the library is not its own judge), plus known limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnbench import metrics


def _random_case(n: int, c: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, c)) * 2.0
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = rng.integers(0, c, size=n)
    return probs, labels


CASES = [(200, 2, 0), (300, 3, 1), (157, 5, 2), (40, 2, 3)]


def _naive_label_metrics(pred: np.ndarray, labels: np.ndarray, c: int) -> dict[str, float]:
    """Accuracy, F1s, MCC and balanced accuracy by counting, loop by loop (no library)."""
    cm = np.zeros((c, c))
    for t, p in zip(labels, pred):
        cm[t, p] += 1
    f1, present, support = [], [], []
    for k in range(c):
        tp, fp, fn = cm[k, k], cm[:, k].sum() - cm[k, k], cm[k, :].sum() - cm[k, k]
        f1.append(2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0)
        present.append(2 * tp + fp + fn > 0)
        support.append(cm[k, :].sum())
    s, correct = cm.sum(), np.trace(cm)
    t_k, p_k = cm.sum(axis=1), cm.sum(axis=0)
    mcc_den = math.sqrt((s * s - p_k @ p_k) * (s * s - t_k @ t_k))
    recalls = [cm[k, k] / support[k] for k in range(c) if support[k]]
    return {
        "accuracy": correct / s,
        "macro_f1": float(np.mean([f for f, q in zip(f1, present) if q])),
        "weighted_f1": float(np.dot(f1, support) / s),
        "mcc": (correct * s - t_k @ p_k) / mcc_den if mcc_den else 0.0,
        "balanced_accuracy": float(np.mean(recalls)),
    }


@pytest.mark.parametrize("n,c,seed", CASES)
def test_label_metrics_match_hand_counts(n, c, seed):
    probs, labels = _random_case(n, c, seed)
    expected = _naive_label_metrics(probs.argmax(axis=1), labels, c)
    got = metrics.classification_metrics(probs, labels)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-12), name
    one_hot = np.eye(c)[labels]
    brier = np.mean(np.sum((probs - one_hot) ** 2, axis=1)) / (2 if c == 2 else 1)
    assert got["brier"] == pytest.approx(brier, rel=1e-12)
    assert got["nll"] == pytest.approx(-np.mean(np.log(probs[np.arange(n), labels])), rel=1e-12)


def test_f1_with_a_class_never_predicted_counts_it_as_zero():
    probs = np.array([[0.9, 0.05, 0.05]] * 4 + [[0.1, 0.8, 0.1]] * 2)
    labels = np.array([0, 2, 2, 0, 1, 2])
    # class 0: tp 2 fp 2 fn 0 -> 4/6; class 1: tp 1 fp 1 fn 0 -> 2/3; class 2: never predicted -> 0
    assert metrics.macro_f1(probs, labels) == pytest.approx((4 / 6 + 2 / 3 + 0) / 3)
    assert metrics.balanced_accuracy(probs, labels) == pytest.approx((1 + 1 + 0) / 3)
    expected = _naive_label_metrics(probs.argmax(axis=1), labels, 3)["mcc"]
    assert metrics.matthews_corrcoef(probs, labels) == pytest.approx(expected)


def _pairwise_auc(scores: np.ndarray, y: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties one half: the O(n^2) definition."""
    pos, neg = scores[y == 1], scores[y == 0]
    return float(np.mean((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])))


def _step_average_precision(scores: np.ndarray, y: np.ndarray) -> float:
    """sum over distinct thresholds t (high to low) of (recall(t) - recall(previous t)) x precision(t)."""
    total, previous_recall = 0.0, 0.0
    for t in sorted(set(scores), reverse=True):
        chosen = scores >= t
        recall = (chosen & (y == 1)).sum() / (y == 1).sum()
        total += (recall - previous_recall) * (chosen & (y == 1)).sum() / chosen.sum()
        previous_recall = recall
    return total


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_binary_ranking_metrics_match_their_definitions(seed):
    probs, labels = _random_case(250, 2, seed)
    probs = np.round(probs, 2)  # ties in the scores
    probs[:, 0] = 1.0 - probs[:, 1]
    assert metrics.roc_auc(probs, labels) == pytest.approx(_pairwise_auc(probs[:, 1], labels))
    assert metrics.average_precision(probs, labels) == pytest.approx(_step_average_precision(probs[:, 1], labels))
    assert metrics.brier_score(probs, labels) == pytest.approx(np.mean((probs[:, 1] - labels) ** 2))


def _naive_ece(conf, correct, n_bins):
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    total = 0.0
    for b in range(n_bins):
        inside = [i for i in range(len(conf)) if (edges[b] < conf[i] <= edges[b + 1]) or (b == 0 and conf[i] == 0.0)]
        if inside:
            acc = sum(correct[i] for i in inside) / len(inside)
            mean_conf = sum(conf[i] for i in inside) / len(inside)
            total += len(inside) / len(conf) * abs(acc - mean_conf)
    return total


@pytest.mark.parametrize("n_bins", [1, 10, 15])
def test_ece_and_reliability_bins_match_naive_loop(n_bins):
    probs, labels = _random_case(301, 4, 7)
    conf, correct = probs.max(axis=1), probs.argmax(axis=1) == labels
    assert metrics.expected_calibration_error(probs, labels, n_bins) == pytest.approx(_naive_ece(conf, correct, n_bins))
    bins = metrics.reliability_bins(probs, labels, n_bins)
    assert len(bins) == n_bins and sum(b["count"] for b in bins) == len(labels)
    for b in bins:
        inside = (conf > b["lower"]) & (conf <= b["upper"])
        assert b["count"] == inside.sum()
        if b["count"]:
            assert b["confidence"] == pytest.approx(conf[inside].mean())
            assert b["accuracy"] == pytest.approx(correct[inside].mean())


def test_equal_mass_ece_matches_naive_loop():
    probs, labels = _random_case(300, 3, 11)  # 300 rows, 15 bins of exactly 20
    conf, correct = probs.max(axis=1), (probs.argmax(axis=1) == labels).astype(float)
    order = np.argsort(conf)
    expected = 0.0
    for b in range(15):
        idx = order[b * 20 : (b + 1) * 20]
        expected += 20 / 300 * abs(correct[idx].mean() - conf[idx].mean())
    assert metrics.equal_mass_calibration_error(probs, labels, 15) == pytest.approx(expected)


def test_calibrated_predictor_has_near_zero_ece():
    rng = np.random.default_rng(0)
    n = 200_000
    p1 = rng.uniform(0.0, 1.0, size=n)
    labels = (rng.uniform(size=n) < p1).astype(int)  # label drawn from the stated probability
    probs = np.stack([1 - p1, p1], axis=1)
    assert metrics.expected_calibration_error(probs, labels) < 0.01
    assert metrics.equal_mass_calibration_error(probs, labels) < 0.01


def test_constant_overconfident_predictor_has_ece_confidence_minus_accuracy():
    labels = np.array([0] * 60 + [1] * 40)
    probs = np.tile([0.95, 0.05], (100, 1))  # always 95% sure of class 0, right 60% of the time
    assert metrics.expected_calibration_error(probs, labels) == pytest.approx(0.95 - 0.60)
    assert metrics.equal_mass_calibration_error(probs, labels) == pytest.approx(0.95 - 0.60)


def test_torch_inputs_and_the_metric_dict():
    probs, labels = _random_case(120, 2, 5)
    from_numpy = metrics.classification_metrics(probs, labels)
    from_torch = metrics.classification_metrics(torch.tensor(probs, dtype=torch.float64), torch.tensor(labels))
    assert from_numpy == pytest.approx(from_torch)
    assert {
        "accuracy",
        "macro_f1",
        "mcc",
        "balanced_accuracy",
        "roc_auc",
        "pr_auc",
        "nll",
        "brier",
        "ece",
        "ece_equal_mass",
    } <= set(from_numpy)
    three_class = metrics.classification_metrics(*_random_case(90, 3, 6))
    assert "roc_auc" not in three_class and "pr_auc" not in three_class


def test_perfect_predictions_and_clipped_nll():
    labels = np.array([0, 1, 1, 0])
    probs = np.eye(2)[labels]
    m = metrics.classification_metrics(probs, labels)
    assert m["accuracy"] == m["mcc"] == m["roc_auc"] == m["pr_auc"] == 1.0
    assert m["brier"] == 0.0 and m["ece"] == 0.0
    assert np.isfinite(metrics.log_loss(1.0 - probs, labels))


def test_bad_inputs_say_what_is_wrong():
    with pytest.raises(ValueError, match="labels must lie in"):
        metrics.accuracy(np.full((3, 2), 0.5), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="binary"):
        metrics.roc_auc(np.full((3, 3), 1 / 3), np.array([0, 1, 2]))
