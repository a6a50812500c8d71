"""The variance of a mean over seeds, from both of its sources: the training seeds and the test examples.

Each function takes a stack of P independent problems and returns one `Spread` per problem (vectorised over P):
the mean, its standard error, the degrees of freedom of its Student-t reference, and the variance components that
`attnbench.decisions.power` projects to other seed counts. "Values" are a per-seed quantity (a metric, or the
difference of two labels' metrics on the same seed); "outcomes" are the per-example numbers it averages (0/1
correct, per-row loss), when the run stored them.

- `over_seeds(values (P, S))`: seeds only: var(values) / S with S - 1 degrees of freedom. Exact for fresh test
  rows (each seed's test set is new: the example noise is inside the seed-to-seed spread); for shared rows it
  leaves out the test set's own sampling error (nothing else is possible without the outcomes).
- `nested(outcomes (P, S, N))`, fresh rows: the same seed-to-seed variance (it holds the examples' share), and
  where the seeds' values coincide exactly, the seeds' own sampling variance var_i / N instead (the least that
  variance can be), so coincident seeds do not make a zero-width interval. Flooring every estimate there, not
  only the degenerate ones, cost a third of the power at 3 seeds in the simulation (0.22 against 0.34 on a
  5-point gap).
- `crossed(outcomes (P, S, N))`, shared rows: the two-way random-effects model y_si = mu + u_s + v_i + w_si
  (seed u, example v, interaction w). From the ANOVA mean squares, Var(mean) = (MS_seed + MS_example -
  MS_residual) / (N S) = tau^2 / S + sigma_v^2 / N + sigma_w^2 / (N S), floored at max(MS_seed, MS_example) /
  (N S) (the crossed-random-effects design of Clark 1973 and Baayen et al. 2008), referred to Student's t with
  the seeds' S - 1 degrees of freedom. Satterthwaite's degrees of freedom, the textbook choice, grow large
  exactly when MS_seed happens to come out small, and at Holm's levels (alpha / m) that made the simulation's
  family-wise error 0.15-0.28 at 3 seeds; S - 1 holds it (docs/decisions.md). The example term (sigma_v^2 / N)
  does not shrink with more seeds: a shared test set bounds what seeds can decide.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Spread:
    """Per problem (arrays of shape (P,)): mean, standard error, degrees of freedom (S - 1), and the components
    that project the variance to other seed counts: Var(mean at S' seeds) = per_seed / S' + fixed."""

    mean: np.ndarray
    se: np.ndarray
    df: np.ndarray
    seeds: int
    per_seed: np.ndarray  # the variance one seed adds (tau^2 + sigma_w^2 / N)
    fixed: np.ndarray  # the variance no number of seeds removes (sigma_v^2 / N; 0 for fresh rows)
    examples: int = 0  # N (0: no outcomes)


def over_seeds(values: np.ndarray) -> Spread:
    """Seeds only: values (P, S) -> mean, se = sd / sqrt(S), S - 1 degrees of freedom (NaN with one seed)."""
    values = np.asarray(values, dtype=float)
    p, s = values.shape
    variance = values.var(axis=1, ddof=1) if s > 1 else np.full(p, np.nan)
    variance = _zero_below_rounding(variance, values)
    return Spread(
        mean=values.mean(axis=1),
        se=np.sqrt(variance / s),
        df=np.full(p, s - 1.0),
        seeds=s,
        per_seed=variance,
        fixed=np.zeros(p),
    )


def nested(outcomes: np.ndarray) -> Spread:
    """Fresh test rows: outcomes (P, S, N) -> the seeds' variance (their sampling variance where they coincide)."""
    outcomes = np.asarray(outcomes, dtype=float)
    p, s, n = outcomes.shape
    seed_means = outcomes.mean(axis=2)
    between = seed_means.var(axis=1, ddof=1) if s > 1 else np.full(p, np.nan)
    between = _zero_below_rounding(between, seed_means)
    within = outcomes.var(axis=2, ddof=1).mean(axis=1) / n
    variance = _zero_below_rounding(np.where(between > 0, between, within), outcomes)
    variance = np.where(np.isnan(between), np.nan, variance)
    return Spread(
        mean=seed_means.mean(axis=1),
        se=np.sqrt(variance / s),
        df=np.full(p, s - 1.0),
        seeds=s,
        per_seed=variance,
        fixed=np.zeros(p),
        examples=n,
    )


def mean_squares(outcomes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two-way ANOVA mean squares (seed, example, residual) of outcomes (P, S, N), one observation per cell."""
    _, s, n = outcomes.shape
    grand = outcomes.mean(axis=(1, 2), keepdims=True)
    seed_means = outcomes.mean(axis=2, keepdims=True)
    example_means = outcomes.mean(axis=1, keepdims=True)
    seed_ms = n * ((seed_means - grand) ** 2).sum(axis=(1, 2)) / (s - 1)
    example_ms = s * ((example_means - grand) ** 2).sum(axis=(1, 2)) / (n - 1)
    residual = outcomes - seed_means - example_means + grand
    residual_ms = (residual**2).sum(axis=(1, 2)) / ((s - 1) * (n - 1))
    return seed_ms, example_ms, residual_ms


def crossed(outcomes: np.ndarray) -> Spread:
    """Shared test rows: outcomes (P, S, N) -> the two-source variance of the grand mean (module docstring)."""
    outcomes = np.asarray(outcomes, dtype=float)
    p, s, n = outcomes.shape
    if s < 2 or n < 2:
        nan = np.full(p, np.nan)
        return Spread(outcomes.mean(axis=(1, 2)), nan, nan, s, nan, nan, n)
    seed_ms, example_ms, residual_ms = mean_squares(outcomes)
    combined = np.maximum(seed_ms + example_ms - residual_ms, np.maximum(seed_ms, example_ms))
    return Spread(
        mean=outcomes.mean(axis=(1, 2)),
        se=np.sqrt(_zero_below_rounding(combined, outcomes) / (s * n)),
        df=np.full(p, s - 1.0),
        seeds=s,
        per_seed=np.maximum(seed_ms, residual_ms) / n,  # tau^2 + sigma_w^2 / N
        fixed=np.maximum(example_ms - residual_ms, 0.0) / (s * n),  # sigma_v^2 / N
        examples=n,
    )


ROUNDING = 1e-6  # a spread below this fraction of the values' size is rounding of coincident values (float32)


def _zero_below_rounding(variance: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`variance` (P,) set to exactly 0 where it is rounding noise of coincident `values` (P, ...): degenerate."""
    flat = np.abs(values.reshape(values.shape[0], -1))
    scale = flat.max(axis=1, initial=0.0) if flat.shape[1] else np.zeros(values.shape[0])
    return np.where(variance <= (ROUNDING * scale) ** 2, 0.0, variance)
