"""The synthetic experiment's methods, each against an independent computation or a known answer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from extras import needs_extra

from attnbench.baselines.coulomb import kernel_methods as km


def test_fourier_features_converge_to_the_rbf_kernel():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5))
    exact = np.exp(-0.5 * np.square(x[:, None] - x[None]).sum(-1))
    errors = []
    for d in (200, 20000):
        w, b = rng.normal(0, 1.0, (5, d)), rng.uniform(0, 2 * math.pi, d)  # N(0, 2 gamma I), gamma = 0.5
        z = km.fourier_features(x, w, b)
        errors.append(np.abs(z @ z.T - exact).max())
    assert errors[1] < 0.04 and errors[1] < errors[0] / 3


def test_rbf_grams_match_the_definition():
    rng = np.random.default_rng(1)
    x, z = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    (gram,) = km.rbf_grams(x, z, [0.7])
    expected = [[math.exp(-0.7 * float(np.sum((a - c) ** 2))) for c in z] for a in x]
    assert np.allclose(gram.numpy(), expected, atol=1e-12)


def test_project_onto_simplex_matches_a_brute_force_minimiser():
    from scipy.optimize import minimize

    rng = np.random.default_rng(2)
    for _ in range(5):
        v = rng.normal(size=6) * 2
        q = km.project_onto_simplex(v)
        ref = minimize(
            lambda p: np.sum((p - v) ** 2),  # noqa: B023
            np.full(6, 1 / 6),
            method="SLSQP",
            bounds=[(0, 1)] * 6,
            constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1}],
            options={"ftol": 1e-14},
        ).x
        assert q.min() >= 0 and q.sum() == pytest.approx(1.0)
        assert np.allclose(q, ref, atol=1e-6)


def test_chi_square_weights_solve_the_constrained_linear_programme():
    from scipy.optimize import minimize

    rng = np.random.default_rng(3)
    scores, n, rho = rng.exponential(size=8), 8, 0.4
    q = km.chi_square_weights(scores, rho, 1e-12)
    cons = [
        {"type": "eq", "fun": lambda p: p.sum() - 1},
        {"type": "ineq", "fun": lambda p: rho / n - np.sum((p - 1 / n) ** 2)},
    ]
    ref = minimize(
        lambda p: -p @ scores,
        np.full(n, 1 / n),
        method="SLSQP",
        bounds=[(0, 1)] * n,
        constraints=cons,
        options={"ftol": 1e-15, "maxiter": 500},
    ).x
    assert np.sum((q - 1 / n) ** 2) == pytest.approx(rho / n, rel=1e-6)  # the ball constraint is active
    assert q @ scores == pytest.approx(ref @ scores, rel=1e-6)
    assert np.allclose(q, ref, atol=1e-4)


def test_stratified_sampling_puts_one_draw_in_each_stratum():
    q = np.array([0.5, 0.25, 0.25])
    rng = np.random.default_rng(4)
    for _ in range(20):
        counts = np.bincount(km.stratified_indices(q, 8, rng), minlength=3)
        assert counts.tolist() == [4, 2, 2]  # exact in expectation and, with strata, every time here


def mkl_split(n=40):
    rng = np.random.default_rng(5)
    y = np.repeat([0, 1], n // 2)
    return km.Split(rng.standard_normal((n, 2)), y, rng.standard_normal((4, 2))), y


@needs_extra("mkl", "MKLpy")
def test_memo_reaches_its_fixed_point_on_a_case_with_a_known_answer():
    """K1 = yy^T + I, K2 = 11^T + I: the hard-margin duals are uniform within each class (2/n each), so the
    margin gradients are g1 = (sum_i |gamma_i|)^2 + |gamma|^2 = 4 + 4/n and g2 = 4/n. MKLpy's MEMO step
    w <- (w + lr g) / sum(w + lr g) stops where w is proportional to g: w1 = (4 + 4/n) / (4 + 8/n)."""
    import contextlib
    import io

    from MKLpy.algorithms import MEMO
    from sklearn.svm import SVC

    _, y = mkl_split()
    n, s = len(y), 2.0 * y - 1
    k1 = torch.from_numpy(np.outer(s, s) + np.eye(n))
    k2 = torch.from_numpy(np.ones((n, n)) + np.eye(n))
    with contextlib.redirect_stdout(io.StringIO()):
        weights = MEMO(learner=SVC(C=1.0), max_iter=1000).fit([k1, k2], torch.from_numpy(y)).solution.weights
    expected = (4 + 4 / n) / (4 + 8 / n)
    assert weights[0].item() == pytest.approx(expected, abs=1e-3)
    assert weights[1].item() == pytest.approx(1 - expected, abs=1e-3)


@needs_extra("mkl", "MKLpy")
def test_mkl_memo_returns_simplex_weights_and_predictions():
    split, _ = mkl_split()
    predictions, weights = km.mkl_memo(split, np.random.default_rng(0), [0.1, 1.0], max_iter=5)
    assert predictions.shape == (4,) and set(predictions.tolist()) <= {0, 1}
    assert weights.shape == (2,) and weights.min() >= 0 and weights.sum() == pytest.approx(1.0)


def small_split():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((400, 5))
    y = (np.square(x[:, :2]).sum(1) > 1.4).astype(np.int64)  # a circle: RBF features separate it, a line cannot
    return km.Split(x[:300], y[:300], x[300:]), y[300:]


@pytest.mark.parametrize("method", [km.rbf_svm, km.random_fourier_features, km.importance_sampling])
def test_kernel_methods_learn_a_circle_that_logistic_regression_cannot(method):
    split, y_test = small_split()
    predictions = method(split, np.random.default_rng(0))
    linear = km.logistic_regression(split, np.random.default_rng(0))
    assert predictions.shape == y_test.shape
    assert (predictions == y_test).mean() > 0.8 > (linear == y_test).mean() + 0.2


def test_rbf_svm_is_sklearns_svc():
    from sklearn.svm import SVC

    split, _ = small_split()
    expected = SVC(kernel="rbf", gamma=100.0, C=1.0).fit(split.x_train, split.y_train).predict(split.x_test)
    assert np.array_equal(km.rbf_svm(split, np.random.default_rng(0), gamma=100.0), expected)


def test_importance_sampling_and_rff_are_seeded():
    split, _ = small_split()
    for method in (km.random_fourier_features, km.importance_sampling):
        a = method(split, np.random.default_rng(7))
        assert np.array_equal(a, method(split, np.random.default_rng(7)))
