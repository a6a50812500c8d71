"""Noisy nonlinear token task, after the paper's synthetic kernel experiment, over token sequences.

Each of `num_tokens` token types carries a fixed random feature vector z in R^p. A row of n tokens
scores
    s = std(mean_i sin(w . z_i)) + interaction_weight * std(mean_i sin(u . o_i)) + noise * eps,
    o_i = sum_{j != i} softmax_j(sharpness * z_i^T A z_j / sqrt(p)) z_j,
with eps ~ N(0, 1) and std(.) standardising each term on a pilot sample. The class is the quantile
bin of s (C equal-mass bins). The second term is a softmax-kernel interaction between different
tokens: only attention provides it in the shared classifier, and the sharper it is, the more an
attention's kernel approximation matters. `noise` is the label-noise sigma.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnbench.options import option, require
from attnbench.tasks import register_task
from attnbench.tasks.base import TaskData
from attnbench.tasks.synthetic import Example, SyntheticConfig, balanced_splits, split_info

PAD_ID = 0
PILOT_SIZE = 4000


@dataclasses.dataclass
class NonlinearConfig(SyntheticConfig):
    """Options of the noisy nonlinear token task."""

    min_length: int = option(16, "fewest tokens in a row")
    max_length: int = option(64, "most tokens in a row (the row width)", maximum=65536)
    num_tokens: int = option(64, "token types (vocabulary without padding)")
    num_features: int = option(8, "feature dimension p of each token type")
    num_classes: int = option(2, "classes: equal-mass quantile bins of the score")
    interaction_weight: float = option(1.0, "weight of the cross-token (softmax-kernel) sine term")
    sharpness: float = option(1.0, "inverse temperature of the cross-token softmax kernel")
    noise: float = option(0.1, "Gaussian noise sigma added to the standardised score before binning")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            2 <= self.min_length <= self.max_length,
            f"min_length={self.min_length} and max_length={self.max_length} need 2 <= min <= max",
        )
        require(self.num_tokens >= 2, f"num_tokens={self.num_tokens} must be at least 2")
        require(self.num_features >= 1, f"num_features={self.num_features} must be at least 1")
        require(self.num_classes >= 2, f"num_classes={self.num_classes} must be at least 2")
        require(self.noise >= 0, f"noise={self.noise} must be non-negative")
        require(self.sharpness >= 0, f"sharpness={self.sharpness} must be non-negative")


class NonlinearScore:
    """The noise-free score terms of a row, from fixed per-token tables drawn from the seed."""

    def __init__(self, cfg: NonlinearConfig):
        rng = np.random.default_rng([cfg.seed, 1])
        p = cfg.num_features
        self.z = rng.standard_normal((cfg.num_tokens, p))  # (V, p)
        w = 2.0 * rng.standard_normal(p) / np.sqrt(p)
        self.a = rng.standard_normal((p, p)) / np.sqrt(p)
        self.u = 2.0 * rng.standard_normal(p) / np.sqrt(p)
        self.single = np.sin(self.z @ w)  # (V,)
        self.logits = cfg.sharpness * (self.z @ self.a @ self.z.T) / np.sqrt(p)  # (V, V)
        self.scale = np.ones(2)
        self.shift = np.zeros(2)
        self.weights = np.array([1.0, cfg.interaction_weight])

    def terms(self, types: np.ndarray) -> np.ndarray:
        """Raw (single, cross-token) terms of one row of token types (0-based), shape (2,)."""
        logits = self.logits[np.ix_(types, types)]
        np.fill_diagonal(logits, -np.inf)  # interactions between different tokens only
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        mixed = weights @ self.z[types]  # (n, p)
        return np.array([self.single[types].mean(), np.sin(mixed @ self.u).mean()])

    def standardise_on(self, rows: list[np.ndarray]) -> np.ndarray:
        """Fix shift and scale of each term on pilot rows; return their noise-free scores."""
        raw = np.stack([self.terms(r) for r in rows])
        self.shift, self.scale = raw.mean(axis=0), raw.std(axis=0) + 1e-12
        return self.score(raw)

    def score(self, raw: np.ndarray) -> np.ndarray:
        return ((raw - self.shift) / self.scale) @ self.weights


class NonlinearSampler:
    """Draws (tokens, quantile class of the noisy score) examples."""

    def __init__(self, cfg: NonlinearConfig):
        self.cfg = cfg
        self.score = NonlinearScore(cfg)
        pilot_rng = np.random.default_rng([cfg.seed, 2])
        pilot = [self._types(pilot_rng) for _ in range(PILOT_SIZE)]
        noisy = self.score.standardise_on(pilot) + cfg.noise * pilot_rng.standard_normal(PILOT_SIZE)
        self.thresholds = np.quantile(noisy, np.arange(1, cfg.num_classes) / cfg.num_classes)

    def _types(self, rng: np.random.Generator) -> np.ndarray:
        n = int(rng.integers(self.cfg.min_length, self.cfg.max_length + 1))
        return rng.integers(self.cfg.num_tokens, size=n)

    def __call__(self, rng: np.random.Generator) -> Example:
        types = self._types(rng)
        s = self.score.score(self.score.terms(types)) + self.cfg.noise * rng.standard_normal()
        label = int(np.searchsorted(self.thresholds, s))
        return tuple(int(t) + 1 for t in types), label


@register_task("nonlinear_tokens", config=NonlinearConfig)
def nonlinear_tokens(cfg: NonlinearConfig) -> TaskData:
    """Noisy nonlinear token task: quantile class of sine and cross-token interaction terms plus noise."""
    sampler = NonlinearSampler(cfg)
    splits = balanced_splits(sampler, cfg.num_classes, cfg, cfg.max_length, "nonlinear_tokens")
    return TaskData(
        "nonlinear_tokens",
        splits,
        num_classes=cfg.num_classes,
        vocab_size=cfg.num_tokens + 1,
        max_length=cfg.max_length,
        pad_id=PAD_ID,
        info={
            "source": "generated (noisy nonlinear token task)",
            "thresholds": sampler.thresholds.tolist(),
            "splits": split_info(splits),
        },
        special_ids=(PAD_ID,),
    )
