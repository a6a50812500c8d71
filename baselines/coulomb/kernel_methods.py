"""The six methods of the synthetic experiment (docs/paper.md "Synthetic experiment"), each fit -> test predictions.

Every method takes the split (x_train, y_train 0/1, x_test) and a seeded numpy Generator (the
trial's method randomness) and returns 0/1 predictions for the test rows. Random-feature methods
use D features z(x) = sqrt(2/D) cos(W^T x + b) and a linear SVM head (sklearn LinearSVC, C = 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import math
import warnings

import numpy as np
import torch

from attnbench.baselines.coulomb.kernel_particles import ParticleDynamics, learn_features
from attnbench.errors import UserError


@dataclasses.dataclass
class Split:
    """One train/test split: x (n, p) float64, labels 0/1 int."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray


def fourier_features(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """z(x) = sqrt(2/D) cos(x W + b): x (n, p), w (p, D), b (D,) -> (n, D); z(x).z(x') estimates the kernel."""
    return math.sqrt(2.0 / w.shape[1]) * np.cos(x @ w + b)


def linear_svm_head(z_train: np.ndarray, y_train: np.ndarray, z_test: np.ndarray, c: float = 1.0) -> np.ndarray:
    """Linear SVM (LinearSVC, C = c) on features -> test predictions; convergence warnings silenced, not fixed."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LinearSVC(C=c).fit(z_train, y_train).predict(z_test)


def logistic_regression(split: Split, rng: np.random.Generator) -> np.ndarray:
    """Logistic regression on the raw inputs (sklearn defaults, C = 1)."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=1000).fit(split.x_train, split.y_train).predict(split.x_test)


def rbf_svm(split: Split, rng: np.random.Generator, gamma: float = 0.5, c: float = 1.0) -> np.ndarray:
    """Exact RBF-kernel SVM exp(-gamma |x - x'|^2), C = c (libsvm)."""
    from sklearn.svm import SVC

    return SVC(kernel="rbf", gamma=gamma, C=c).fit(split.x_train, split.y_train).predict(split.x_test)


def random_fourier_features(
    split: Split, rng: np.random.Generator, num_features: int = 200, gamma: float = 0.5
) -> np.ndarray:
    """RFF + linear SVM: W ~ N(0, 2 gamma I), b ~ U[0, 2 pi) (Rahimi-Recht for the RBF kernel)."""
    w = rng.normal(0.0, math.sqrt(2 * gamma), (split.x_train.shape[1], num_features))
    b = rng.uniform(0.0, 2 * math.pi, num_features)
    return linear_svm_head(fourier_features(split.x_train, w, b), split.y_train, fourier_features(split.x_test, w, b))


def projected_random_fourier_features(
    split: Split, rng: np.random.Generator, num_features: int = 200, gamma: float = 0.5, radius: float = 5.0
) -> np.ndarray:
    """The RFF control of the Langevin particles: W ~ N(0, 2 gamma I) (the particles' start) with every frequency
    longer than `radius` projected onto it, as the dynamics' first step does with no force and no noise."""
    w = rng.normal(0.0, math.sqrt(2 * gamma), (split.x_train.shape[1], num_features))
    w = w * np.minimum(1.0, radius / np.maximum(np.linalg.norm(w, axis=0), 1e-300))
    b = rng.uniform(0.0, 2 * math.pi, num_features)
    return linear_svm_head(fourier_features(split.x_train, w, b), split.y_train, fourier_features(split.x_test, w, b))


def rbf_grams(x: np.ndarray, z: np.ndarray, gammas: list[float]) -> list[torch.Tensor]:
    """exp(-gamma |x_i - z_j|^2) for each gamma: x (n, p), z (m, p) -> [(n, m) float64 tensors]."""
    from sklearn.metrics.pairwise import euclidean_distances

    sq = euclidean_distances(x, z, squared=True)
    return [torch.from_numpy(np.exp(-g * sq)) for g in gammas]


MKL_MISSING = (
    "the MKL method needs MKLpy (and cvxopt), the optional extra 'mkl': pip install 'attnbench[mkl]'; "
    "without it the kernel experiment runs every other method"
)


def mkl_available() -> bool:
    """Whether MKLpy, an optional extra used by the MKL + SVM method alone, is installed."""
    return importlib.util.find_spec("MKLpy") is not None


def mkl_memo(
    split: Split, rng: np.random.Generator, gammas: list[float], max_iter: int = 1000, c: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """MKL + SVM: MKLpy's MEMO weights over kernel-normalised RBF Grams, SVC(C = c) on the combination.

    Returns (test predictions, the kernel weights). An RBF Gram has a unit diagonal, so MKLpy's
    normalisation K_ij / sqrt(K_ii K_jj) leaves it (and the test Grams) unchanged. MKLpy's own
    progress prints are swallowed.
    """
    if not mkl_available():
        raise UserError(MKL_MISSING)
    from MKLpy.algorithms import MEMO
    from MKLpy.preprocessing import kernel_normalization
    from sklearn.svm import SVC

    train = [kernel_normalization(k) for k in rbf_grams(split.x_train, split.x_train, gammas)]
    test = rbf_grams(split.x_test, split.x_train, gammas)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = MEMO(learner=SVC(C=c), max_iter=max_iter).fit(train, torch.from_numpy(split.y_train))
        predictions = model.predict(test)
    return np.asarray(predictions), model.solution.weights.numpy()


def project_onto_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of v (N,) onto {q >= 0, sum q = 1} (sort and threshold)."""
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - 1.0
    index = np.arange(1, len(v) + 1)
    rho = np.nonzero(u - cumulative / index > 0)[0][-1]
    return np.maximum(v - cumulative[rho] / (rho + 1), 0.0)


def chi_square_weights(scores: np.ndarray, rho: float, tol: float) -> np.ndarray:
    """Sinha-Duchi step 2: argmax_q q.scores over the simplex with |q - 1/N|^2 <= rho / N (bisection on the dual).

    The dual variable lambda of the ball constraint is bracketed by doubling, then halved until the
    bracket is below tol (relative to the first bracket); q(lambda) = P_simplex(1/N + scores / lambda).
    """
    n = len(scores)
    uniform = np.full(n, 1.0 / n)
    radius = rho / n

    def weights(lam: float) -> np.ndarray:
        return project_onto_simplex(uniform + scores / lam)

    high = 1.0
    while np.square(weights(high) - uniform).sum() > radius:
        high *= 2.0
    low, start = 0.0, high
    while high - low > tol * start:
        mid = (low + high) / 2
        if np.square(weights(mid) - uniform).sum() > radius:
            low = mid
        else:
            high = mid
    return weights(high)


def stratified_indices(q: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` draws from the distribution q, one uniform in each of `count` equal strata of [0, 1)."""
    cdf = np.cumsum(q / q.sum())
    u = (np.arange(count) + rng.uniform(size=count)) / count
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(q) - 1)


def importance_sampling(
    split: Split,
    rng: np.random.Generator,
    num_features: int = 200,
    gamma: float = 0.5,
    candidates: int = 10_000,
    rho_fraction: float = 0.005,
    tol: float = 1e-10,
    chunk: int = 2048,
) -> np.ndarray:
    """Sinha & Duchi (2016): N_w RFF candidates, alignment scores (Phi^T y)^2, chi-square reweighting, D kept.

    Candidates W ~ N(0, 2 gamma I), b ~ U[0, 2 pi); rho = rho_fraction * N_w; the D features are drawn
    from q by stratified sampling, then a linear SVM. Scores are computed in row chunks (memory O(chunk N_w)).
    """
    p = split.x_train.shape[1]
    w = rng.normal(0.0, math.sqrt(2 * gamma), (p, candidates))
    b = rng.uniform(0.0, 2 * math.pi, candidates)
    y = 2.0 * split.y_train - 1.0
    projections = np.zeros(candidates)
    for start in range(0, len(y), chunk):
        projections += y[start : start + chunk] @ np.cos(split.x_train[start : start + chunk] @ w + b)
    q = chi_square_weights(np.square(projections), rho_fraction * candidates, tol)
    keep = stratified_indices(q, num_features, rng)
    return linear_svm_head(
        fourier_features(split.x_train, w[:, keep], b[keep]),
        split.y_train,
        fourier_features(split.x_test, w[:, keep], b[keep]),
    )


def langevin_particles(
    split: Split,
    rng: np.random.Generator,
    repulsion: float,
    num_features: int = 200,
    gamma: float = 0.5,
    dynamics: ParticleDynamics = ParticleDynamics(),  # noqa: B008
) -> tuple[np.ndarray, dict[str, float]]:
    """Algorithms 1 and 2 (`attnbench.baselines.coulomb.kernel_particles`) at one lambda, then Fourier features + linear SVM.

    Returns the test predictions and the dynamics' diagnostics (drift against noise, alignment).
    """
    generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
    x = torch.from_numpy(split.x_train)
    omega, phase, diagnostics = learn_features(
        x, torch.from_numpy(split.y_train), [repulsion], num_features, gamma, dynamics, generator
    )
    w, b = omega[0].T.numpy(), phase[0].numpy()
    predictions = linear_svm_head(
        fourier_features(split.x_train, w, b), split.y_train, fourier_features(split.x_test, w, b)
    )
    return predictions, diagnostics[0]
