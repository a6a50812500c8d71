"""The tabular kernel experiment: data, features against the RBF kernel, rows, and the `kernel` measurement."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from baselines.coulomb import kernel_target_alignment
from harness.errors import ConfigError
from harness.kernel_experiment import (KernelExperimentConfig, fourier_features, initial_particles,
                                       learn_particles, make_tabular_data, method_label, run_noise_level,
                                       summarise)
from harness.options import make_options

SMALL = dict(num_samples=80, noise_levels=2, sigma_min=1e-3, sigma_max=1e3, feature_budgets=[8, 16],
             lambdas=[0.5, 0.0], ablation_lambdas=[0.0, 1.0], ablation_budget=8, steps=20)


def small_config(**overrides) -> KernelExperimentConfig:
    return make_options(KernelExperimentConfig, {**SMALL, **overrides}, what="kernel")


def test_design_is_seeded_split_and_standardised():
    cfg = small_config()
    a, b = make_tabular_data(cfg, 1e-3, seed=1), make_tabular_data(cfg, 1e-3, seed=1)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert a.x_train.shape == (60, 5) and a.x_test.shape == (20, 5)
    assert np.allclose(a.x_train.mean(axis=0), 0) and np.allclose(a.x_train.std(axis=0), 1)
    assert not np.array_equal(make_tabular_data(cfg, 1e-3, seed=2).x_train, a.x_train)


def test_noise_scale_controls_the_labels():
    cfg = small_config(num_samples=400)
    clean, cleaner = make_tabular_data(cfg, 1e-5, 0), make_tabular_data(cfg, 1e-9, 0)
    noisy = make_tabular_data(cfg, 1e5, 0)
    assert np.array_equal(clean.x_train, noisy.x_train)  # one fixed design for every sigma
    assert np.array_equal(clean.y_train, cleaner.y_train)
    assert abs(clean.y_train.mean() - 0.5) < 0.06  # latent centred at its median
    agreement = (clean.y_train == noisy.y_train).mean()
    assert 0.4 < agreement < 0.6  # sigma = 1e5 drowns the signal


def test_fourier_features_give_the_rbf_kernel():
    x = torch.randn(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    omega = torch.randn(1, 20000, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    phi = fourier_features(x, omega)[0]
    gram = phi @ phi.T / phi.shape[1]
    exact_estimate = torch.cos((x @ omega[0].T)[:, None, :] - (x @ omega[0].T)[None, :, :]).mean(-1)
    assert torch.allclose(gram, exact_estimate, atol=1e-10)
    rbf = torch.exp(-torch.cdist(x, x).square() / 2)  # gamma = 0.5
    assert (gram - rbf).abs().max() < 0.03


def test_learned_particles_raise_alignment_at_low_noise():
    cfg = small_config(num_samples=200, steps=60)
    data = make_tabular_data(cfg, 1e-3, seed=0)
    omega = initial_particles(16, cfg, seed=0)
    learned, history = learn_particles(data, omega, cfg, repulsion=0.0, seed=0)
    assert learned.shape == omega.shape and len(history) == 60
    before = kernel_target_alignment(fourier_features(torch.from_numpy(data.x_train), omega)[0],
                                     torch.from_numpy(data.y_train)).item()
    assert history[0]["alignment"] == pytest.approx(before)
    assert history[-1]["alignment"] > 3 * before > 0
    assert learned.norm(dim=-1).max() <= cfg.radius * math.sqrt(5) + 1e-9


def test_rows_cover_every_method_budget_and_lambda_once():
    cfg = small_config()
    rows = run_noise_level(cfg, 1e-3, seed=0)
    labels = [method_label(r) for r in rows]
    assert labels == ["logistic", "rbf-svm", "fixed-rff@8", "learned@8,lambda=0.5", "learned@8,lambda=0",
                      "learned@8,lambda=1", "fixed-rff@16", "learned@16,lambda=0.5", "learned@16,lambda=0"]
    for row in rows:
        assert {"method", "sigma", "num_features", "lambda", "accuracy", "f1", "seconds"} <= set(row)
        assert 0 <= row["accuracy"] <= 1 and 0 <= row["f1"] <= 1 and row["seconds"] >= 0
    from sklearn.svm import SVC
    data = make_tabular_data(cfg, 1e-3, seed=0)
    svm = SVC(kernel="rbf", gamma=0.5).fit(data.x_train, data.y_train)
    assert rows[1]["accuracy"] == pytest.approx(float((svm.predict(data.x_test) == data.y_test).mean()))
    noisy = run_noise_level(small_config(feature_budgets=[8], ablation_lambdas=[], lambdas=[0.0]), 1e3, seed=0)
    metrics = summarise(rows + noisy)
    assert metrics["rbf-svm/accuracy"] == pytest.approx((rows[1]["accuracy"] + noisy[1]["accuracy"]) / 2)


def test_kernel_measurement_through_run_cell():
    from harness.measurements import measurement_names, run_cell
    assert "kernel" in measurement_names()
    cell = {"suite": "t", "task": {"name": "none", "options": {}}, "attention": {"name": "none"}, "seed": 0,
            "model": {}, "training": {},
            "measurement": {"name": "kernel", "options": {**SMALL, "noise_levels": 1, "feature_budgets": [8],
                                                          "ablation_lambdas": []}}}
    result = run_cell(cell)
    json.dumps(result, allow_nan=False)
    assert [method_label(r) for r in result["details"]["rows"]] == [
        "logistic", "rbf-svm", "fixed-rff@8", "learned@8,lambda=0.5", "learned@8,lambda=0"]
    assert set(result["metrics"]) >= {"logistic/accuracy", "learned@8,lambda=0/f1", "fixed-rff@8/seconds"}


def test_config_errors_name_the_option():
    with pytest.raises(ConfigError, match="num_inputs=3"):
        small_config(num_inputs=3)
    with pytest.raises(ConfigError, match="sigma_min"):
        small_config(sigma_min=10.0, sigma_max=1.0)
    with pytest.raises(ConfigError, match="step="):
        small_config(step=-1.0)
