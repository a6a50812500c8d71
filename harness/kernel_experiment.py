"""The paper's synthetic kernel-learning experiment (PAPER.md "Reported setup (synthetic)"), no Transformer.

A fixed n x p Gaussian design; binary labels from sin(pi x1) + x2 x3 + 0.5 sin(x4 + x5) plus
Gaussian noise of scale sigma on the latent (**ours**: the summaries name only "sine and
interaction terms"; the latent is centred at its median so low-noise classes are balanced, and one
standard-normal noise draw is scaled by every sigma, so levels differ only in sigma). A seeded
train/test split; inputs standardised on the training rows. Compared, each with accuracy, F1 and
seconds: logistic regression, an exact RBF-kernel SVM (gamma 0.5), fixed random Fourier features
(omega ~ N(0, I), the RBF kernel with gamma 0.5) + logistic regression, and the same features with
particles learned by the Coulomb dynamics (`baselines.coulomb.align_particles`, full batch on the
training rows, starting from the fixed draw) + logistic regression, for each feature budget and
repulsion weight lambda, plus the lambda ablation at one budget.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from baselines.coulomb import DynamicsConfig, align_particles, kernel_target_alignment
from baselines.random_features import feature_values
from harness.options import option, require


@dataclasses.dataclass
class KernelExperimentConfig:
    """Design, noise levels, methods and particle dynamics of the tabular experiment."""

    uses_task: ClassVar[bool] = False  # suites run it once per seed, not per task or attention
    uses_attention: ClassVar[bool] = False

    num_samples: int = option(400, "rows of the design matrix (paper: 400)")
    num_inputs: int = option(5, "columns p of the design matrix (paper: p >= 5)")
    sigma_min: float = option(1e-5, "smallest label-noise scale (paper: 1e-5)")
    sigma_max: float = option(1e5, "largest label-noise scale (paper: 1e5)")
    noise_levels: int = option(10, "log-spaced noise levels from sigma_min to sigma_max (paper: 10)")
    test_fraction: float = option(0.25, "share of rows held out for testing (ours)")
    feature_budgets: list[int] = option([64, 256], "numbers of particles M compared, fixed vs learned (paper: 64, 256)")
    lambdas: list[float] = option([0.5, 0.0], "repulsion weights of the learned-particle methods (paper: 0.5, 0)")
    ablation_lambdas: list[float] = option([0.0, 0.2, 0.5, 0.8, 1.0, 1.5], "lambda ablation (paper's grid)")
    ablation_budget: int = option(64, "number of particles in the lambda ablation (ours)")
    svm_gamma: float = option(0.5, "RBF kernel exp(-gamma |x - x'|^2) of the SVM and of the fixed features (paper: 0.5)")
    steps: int = option(300, "particle steps, full batch on the training rows (ours)")
    step: float = option(0.05, "Langevin step eta (ours: the attention's 2e-3 barely moves tabular particles)")
    beta: float = option(1e4, "inverse temperature of the dynamics (ours)")
    radius: float = option(1.5, "particle norm cap R in units of sqrt(p) (paper's 1.5, our units)")
    classifier_c: float = option(1.0, "inverse L2 strength of every logistic regression (sklearn's C)")

    def __post_init__(self) -> None:
        require(self.num_samples >= 8, f"num_samples={self.num_samples} must be at least 8")
        require(self.num_inputs >= 5, f"num_inputs={self.num_inputs} must be at least 5 (the label function uses 5)")
        require(0 < self.sigma_min <= self.sigma_max, f"need 0 < sigma_min <= sigma_max, got {self.sigma_min}, {self.sigma_max}")
        require(self.noise_levels >= 1, f"noise_levels={self.noise_levels} must be at least 1")
        require(0 < self.test_fraction < 1, f"test_fraction={self.test_fraction} must lie in (0, 1)")
        require(all(m >= 2 for m in self.feature_budgets + [self.ablation_budget]),
                f"feature budgets {self.feature_budgets} and ablation_budget={self.ablation_budget} must be >= 2")
        require(self.steps >= 1, f"steps={self.steps} must be at least 1")
        self.dynamics(0.0)  # validates step, beta, radius

    def dynamics(self, repulsion: float) -> DynamicsConfig:
        """The particle dynamics at repulsion weight lambda (other settings: the attention's defaults)."""
        return DynamicsConfig(step=self.step, beta=self.beta, radius=self.radius, repulsion=repulsion)

    def sigmas(self) -> list[float]:
        """The noise levels, log-spaced."""
        return np.logspace(math.log10(self.sigma_min), math.log10(self.sigma_max), self.noise_levels).tolist()


@dataclasses.dataclass
class TabularData:
    """Standardised train/test design (float64) and 0/1 labels of one noise level."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def label_function(x: np.ndarray) -> np.ndarray:
    """The nonlinear signal: sin(pi x1) + x2 x3 + 0.5 sin(x4 + x5) for x (n, p >= 5) -> (n,)."""
    return np.sin(np.pi * x[:, 0]) + x[:, 1] * x[:, 2] + 0.5 * np.sin(x[:, 3] + x[:, 4])


def make_tabular_data(cfg: KernelExperimentConfig, sigma: float, seed: int) -> TabularData:
    """The fixed seeded design with labels at noise scale sigma, split and standardised."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((cfg.num_samples, cfg.num_inputs))
    noise = rng.standard_normal(cfg.num_samples)
    order = rng.permutation(cfg.num_samples)
    signal = label_function(x)
    y = (signal - np.median(signal) + sigma * noise > 0).astype(np.int64)
    n_test = max(2, round(cfg.test_fraction * cfg.num_samples))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(axis=0), x[train].std(axis=0)
    z = (x - mean) / std
    return TabularData(z[train], y[train], z[test], y[test])


def fourier_features(x: Tensor, omega: Tensor) -> Tensor:
    """Random Fourier features through the shared `trig` map: x (n, p), omega (S, M, p) -> (S, n, 2M).

    feature_values scales x by p^(-1/4); x is pre-scaled by p^(1/4) so u = omega^T x. Features are
    multiplied by sqrt(2M), so Phi Phi^T / (2M) = (1/M) sum_k cos(omega_k^T (x - x')), the RBF kernel
    exp(-|x - x'|^2 / 2) in expectation for omega ~ N(0, I).
    """
    p = x.shape[-1]
    phi = feature_values("trig", (x * p ** 0.25)[None, None].expand(1, omega.shape[0], -1, -1), omega,
                         is_query=False)[0]
    return phi * math.sqrt(phi.shape[-1])


def initial_particles(num_particles: int, cfg: KernelExperimentConfig, seed: int) -> Tensor:
    """The fixed random-feature draw, omega ~ N(0, 2 gamma I): (1, M, p) float64."""
    generator = torch.Generator().manual_seed(seed * 7919 + num_particles)
    omega = torch.randn(1, num_particles, cfg.num_inputs, generator=generator, dtype=torch.float64)
    return omega * math.sqrt(2 * cfg.svm_gamma)


def learn_particles(data: TabularData, omega: Tensor, cfg: KernelExperimentConfig, repulsion: float,
                    seed: int) -> tuple[Tensor, list[dict[str, float]]]:
    """Coulomb dynamics of omega (1, M, p) on the training rows (full batch) -> particles, step diagnostics."""
    x = torch.from_numpy(data.x_train)
    y = torch.from_numpy(data.y_train)
    generator = torch.Generator().manual_seed(seed)
    omega, history = align_particles(omega, [(lambda w: fourier_features(x, w), y)], cfg.dynamics(repulsion),
                                     max_steps=cfg.steps, generator=generator, num_classes=2)
    return omega, history[0]


def _scores(classifier: Any, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
            y_test: np.ndarray) -> tuple[float, float]:
    """Fit, then (accuracy, F1) on the test rows; a single-class training set predicts that class.

    One BLAS/OpenMP thread: these problems are tiny, and more threads only contend (10x slower here).
    """
    from sklearn.metrics import accuracy_score, f1_score
    from threadpoolctl import threadpool_limits
    if len(np.unique(y_train)) < 2:
        predictions = np.full_like(y_test, y_train[0])
    else:
        with threadpool_limits(limits=1):
            predictions = classifier.fit(x_train, y_train).predict(x_test)
    return float(accuracy_score(y_test, predictions)), float(f1_score(y_test, predictions, zero_division=0))


def _features_np(x: np.ndarray, omega: Tensor) -> np.ndarray:
    with torch.no_grad():
        return fourier_features(torch.from_numpy(x), omega)[0].numpy()


Row = dict[str, Any]


def run_noise_level(cfg: KernelExperimentConfig, sigma: float, seed: int) -> list[Row]:
    """All methods at one noise level -> rows {method, sigma, num_features, lambda, accuracy, f1, seconds, ...}."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    data = make_tabular_data(cfg, sigma, seed)
    rows: list[Row] = []

    def record(method: str, fit: Callable[[], tuple[float, float]], num_features: int | None = None,
               lam: float | None = None, extra: dict[str, float] | None = None) -> None:
        start = time.perf_counter()
        accuracy, f1 = fit()
        rows.append({"method": method, "sigma": sigma, "num_features": num_features, "lambda": lam,
                     "accuracy": accuracy, "f1": f1, "seconds": time.perf_counter() - start, **(extra or {})})

    def linear() -> LogisticRegression:
        return LogisticRegression(C=cfg.classifier_c, max_iter=2000)

    record("logistic", lambda: _scores(linear(), data.x_train, data.y_train, data.x_test, data.y_test))
    record("rbf-svm", lambda: _scores(SVC(kernel="rbf", gamma=cfg.svm_gamma), data.x_train, data.y_train,
                                      data.x_test, data.y_test))

    def on_features(omega: Tensor) -> tuple[float, float]:
        return _scores(linear(), _features_np(data.x_train, omega), data.y_train,
                       _features_np(data.x_test, omega), data.y_test)

    runs = [(m, lam) for m in cfg.feature_budgets for lam in cfg.lambdas]
    runs += [(cfg.ablation_budget, lam) for lam in cfg.ablation_lambdas if (cfg.ablation_budget, lam) not in runs]
    for m in sorted({m for m, _ in runs}):
        omega = initial_particles(m, cfg, seed)
        record("fixed-rff", lambda: on_features(omega), m)
        for budget, lam in runs:
            if budget == m:
                _record_learned(record, on_features, data, omega, cfg, lam, seed)
    return rows


def _record_learned(record: Callable[..., None], on_features: Callable[[Tensor], tuple[float, float]],
                    data: TabularData, omega: Tensor, cfg: KernelExperimentConfig, lam: float, seed: int) -> None:
    """One learned-particle row: dynamics time included in its seconds; alignment before/after kept."""
    info: dict[str, float] = {}

    def fit() -> tuple[float, float]:
        learned, history = learn_particles(data, omega, cfg, lam, seed)
        info.update(alignment_before=history[0]["alignment"], alignment_after=_alignment(data, learned),
                    steps=len(history))
        return on_features(learned)

    record("learned", fit, omega.shape[1], lam, info)


def _alignment(data: TabularData, omega: Tensor) -> float:
    with torch.no_grad():
        phi = fourier_features(torch.from_numpy(data.x_train), omega)[0]
        return float(kernel_target_alignment(phi, torch.from_numpy(data.y_train), num_classes=2))


def run_kernel_experiment(cfg: KernelExperimentConfig, seed: int = 0,
                          progress: Callable[[str, int, int], None] | None = None) -> list[Row]:
    """Every noise level of the experiment -> all rows."""
    rows: list[Row] = []
    sigmas = cfg.sigmas()
    for i, sigma in enumerate(sigmas):
        rows.extend(run_noise_level(cfg, sigma, seed))
        if progress is not None:
            progress("kernel", i + 1, len(sigmas))
    return rows


def summarise(rows: list[Row]) -> dict[str, float]:
    """Flat metrics: mean accuracy / F1 over noise levels per method label, and learned/fixed budget retention."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(method_label(row), []).append(row)
    metrics = {}
    for label, group in groups.items():
        metrics[f"{label}/accuracy"] = float(np.mean([r["accuracy"] for r in group]))
        metrics[f"{label}/f1"] = float(np.mean([r["f1"] for r in group]))
        metrics[f"{label}/seconds"] = float(np.mean([r["seconds"] for r in group]))
    return metrics


def method_label(row: Row) -> str:
    """'logistic', 'fixed-rff@64', 'learned@256,lambda=0.5'."""
    label = row["method"]
    if row["num_features"] is not None:
        label += f"@{row['num_features']}"
    if row["lambda"] is not None:
        label += f",lambda={row['lambda']:g}"
    return label
