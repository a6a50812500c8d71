"""The synthetic experiment (Appendix F.1): design, labels, rows of every part, exponent fit, and the `kernel` measurement."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from cells import NO_TASK, tiny_cell
from extras import needs_extra

from attnbench.baselines.coulomb.kernel_experiment import (
    KernelExperimentConfig,
    fit_exponent,
    logit,
    make_design,
    run_kernel_experiment,
    scaling_fits,
    skip_reason,
    summarise,
    trial_labels,
)
from attnbench.errors import ConfigError
from attnbench.options import make_options

SMALL = dict(
    num_samples=60,
    noise_levels=2,
    trials=2,
    particles=12,
    num_features=8,
    particle_steps=5,
    mkl_max_iter=3,
    is_candidates=200,
    ablation_lambdas=[0.0, 1.0],
    scaling_sizes=[40, 80],
)


def small_config(**overrides) -> KernelExperimentConfig:
    return make_options(KernelExperimentConfig, {**SMALL, **overrides}, what="measurement 'kernel'")


def test_logit_against_a_hand_computed_value():
    x = np.array([[0.5, 2.0, 1.0, -3.0, math.pi / 6, 1.0, 2.0]])
    # 1.5 sin(pi/2) + 0.8 * 4 - (1)(-3) + 0.5 sin(pi/2) + (1 * 0.1 + 2 * -0.2) = 1.5 + 3.2 + 3 + 0.5 - 0.3
    assert logit(x, np.array([0.1, -0.2]))[0] == pytest.approx(7.9)
    assert logit(x[:, :5], np.zeros(0))[0] == pytest.approx(8.2)


def test_design_is_the_global_seed_and_one_70_30_split():
    from sklearn.model_selection import train_test_split

    a, b = make_design(400, 5, 42, 0.3, 0), make_design(400, 5, 42, 0.3, 0)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.x, np.random.default_rng(42).standard_normal((400, 5)))
    train, test = train_test_split(np.arange(400), test_size=0.3, random_state=0)
    assert np.array_equal(a.train, np.sort(train)) and np.array_equal(a.test, np.sort(test))
    assert len(a.test) == 120 and not np.array_equal(make_design(400, 5, 7, 0.3, 0).x, a.x)
    wide = make_design(50, 8, 42, 0.3, 0)
    w = np.random.default_rng(42)
    w.standard_normal((50, 8))
    assert np.allclose(wide.logit, logit(wide.x, w.normal(0.0, 0.3, 3)))


def test_labels_follow_the_logit_and_only_the_noise_changes_between_trials():
    design = make_design(4000, 5, 42, 0.3, 0)
    labels = trial_labels(design, [1e-5, 1e5], 42, 0)
    assert labels.shape == (2, 4000) and set(np.unique(labels)) == {0, 1}
    probability = 1 / (1 + np.exp(-design.logit))
    assert abs(labels[0].mean() - probability.mean()) < 0.02  # Bernoulli(sigmoid(l)) at negligible noise
    agreement = (labels[0] == (design.logit > 0)).mean()
    assert 0.6 < agreement < 0.85  # the labels are noisy even at sigma -> 0
    assert abs(labels[1].mean() - 0.5) < 0.03  # sigma = 1e5 drowns the logit
    assert np.array_equal(labels, trial_labels(design, [1e-5, 1e5], 42, 0))
    assert not np.array_equal(labels[0], trial_labels(design, [1e-5], 42, 1)[0])


def test_exponent_fit_recovers_synthetic_power_laws():
    n = np.array([100, 300, 1000, 3000, 10000])
    fit = fit_exponent(n.tolist(), (0.002 * n**1.5).tolist())
    assert fit["exponent"] == pytest.approx(1.5) and fit["r2"] == pytest.approx(1.0) and fit["points"] == 5
    noisy = 3e-4 * n**0.7 * np.exp(np.random.default_rng(0).normal(0, 0.05, 5))
    assert fit_exponent(n.tolist(), noisy.tolist())["exponent"] == pytest.approx(0.7, abs=0.05)
    assert math.isnan(fit_exponent([100], [1.0])["exponent"])


def test_scaling_caps_and_memory_are_recorded_reasons():
    cfg = small_config(scaling_max_rows={"mkl": 1000}, memory_gib=1.0)
    assert skip_reason(cfg, "mkl", 500, 350) == ""
    assert "scaling_max_rows[mkl]=1000" in skip_reason(cfg, "mkl", 2000, 1400)
    assert "GiB" in skip_reason(small_config(memory_gib=1.0), "mkl", 20000, 14000)
    assert skip_reason(cfg, "rff", 20000, 14000) == ""


@needs_extra("mkl", "MKLpy")
def test_every_part_produces_its_rows():
    cfg = small_config()
    rows = run_kernel_experiment(cfg, seed=42)
    noise = [r for r in rows if r["part"] == "noise"]
    names = [
        "logistic",
        "rbf-svm gamma=0.5",
        "rbf-svm gamma=0.01",
        "rbf-svm gamma=100",
        "rff",
        "mkl",
        "importance-sampling",
        "langevin lambda=0.5",
        "langevin lambda=0",
    ]
    assert list(dict.fromkeys(r["method"] for r in noise)) == names
    assert len(noise) == len(names) * 2 * 2
    for row in noise:
        assert 0 <= row["accuracy"] <= 1 and 0 <= row["f1"] <= 1 and row["seconds"] >= 0
    ablation = {(r["method"], r["trial"]) for r in rows if r["part"] == "ablation"}
    assert ablation == {(f"langevin lambda={lam}", t) for lam in ("0", "1") for t in (0, 1)}
    scaling = [r for r in rows if r["part"] == "scaling"]
    assert {r["n"] for r in scaling} == {40, 80} and all(r["status"] == "ok" for r in scaling)
    fits = scaling_fits(rows)
    assert set(fits) == {"mkl", "rbf-svm gamma=0.5", "importance-sampling", "rff", "langevin lambda=0.5", "logistic"}
    metrics = summarise(rows)
    smallest = min(r["sigma"] for r in noise)
    assert smallest == pytest.approx(1e-5)
    low = [r["accuracy"] for r in noise if r["method"] == "rff" and r["sigma"] == smallest]
    assert len(low) == 2
    assert metrics["rff/accuracy@smallest_sigma"] == pytest.approx(np.mean(low))
    assert metrics["scaling/rff/exponent"] == pytest.approx(fits["rff"]["exponent"])
    again = run_kernel_experiment(cfg, seed=42)
    assert [r["accuracy"] for r in again] == [r["accuracy"] for r in rows]  # seeded end to end


def test_kernel_measurement_through_run_cell():
    from attnbench.measurements import measurement_names, run_cell

    assert "kernel" in measurement_names()
    options = {**SMALL, "noise_levels": 1, "trials": 1, "ablation_lambdas": [], "scaling_sizes": []}
    cell = tiny_cell("kernel", "none", options=options, seed=42, task=NO_TASK, model={}, training={})
    result = run_cell(cell)
    json.dumps(result, allow_nan=False)
    assert {r["part"] for r in result["details"]["rows"]} == {"noise"}
    assert result["details"]["paper"]["scaling_exponents"]["mkl"] == 1.96
    assert "langevin lambda=0.5/accuracy@smallest_sigma" in result["metrics"]


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(num_inputs=3), "num_inputs=3"),
        (dict(sigma_min=10.0, sigma_max=1.0), "sigma_min"),
        (dict(num_features=20), "num_features=20"),
        (dict(scaling_max_rows={"svm": 10}), "scaling_max_rows names"),
        (dict(riesz_s=-1.0), "riesz_s=-1"),
        (dict(scaling_sizes=[5]), "scaling_sizes"),
    ],
)
def test_config_errors_name_the_option(options, message):
    with pytest.raises(ConfigError, match=message):
        small_config(**options)


def test_bayes_accuracy_is_the_expected_accuracy_of_the_bayes_rule():
    design = make_design(400, 5, 42, 0.3, 0)
    from attnbench.baselines.coulomb.kernel_experiment import bayes_accuracy

    hits = [
        (trial_labels(design, [1e-5], 42, t)[0][design.test] == (design.logit[design.test] > 0)).mean()
        for t in range(300)
    ]
    assert bayes_accuracy(design) == pytest.approx(np.mean(hits), abs=0.005)


def test_processes_give_the_same_rows_as_one_process():
    cfg = dict(noise_levels=1, trials=2, ablation_lambdas=[], scaling_sizes=[40])
    one = run_kernel_experiment(small_config(**cfg), seed=42)
    two = run_kernel_experiment(small_config(**cfg, processes=2), seed=42)
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in one] == [
        {k: v for k, v in r.items() if k != "seconds"} for r in two
    ]


def test_without_the_mkl_extra_the_mkl_method_is_left_out_and_says_how_to_install(monkeypatch):
    from attnbench.baselines.coulomb import kernel_experiment, kernel_methods
    from attnbench.errors import UserError

    monkeypatch.setattr(kernel_methods, "mkl_available", lambda: False)
    cfg = KernelExperimentConfig()
    assert "mkl" not in kernel_experiment.methods(cfg, cfg.lambdas) and "mkl" not in kernel_experiment.scaling_methods(
        cfg
    )
    with pytest.raises(UserError, match=r"pip install 'attnbench\[mkl\]'"):
        kernel_methods.mkl_memo(None, None, [0.5])
