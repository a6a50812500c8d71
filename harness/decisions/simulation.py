"""Synthetic results with known effects, and the engine's error rates on them: the validation of the engine.

Model (accuracy-like, per test example): correct ~ Bernoulli(sigmoid(mu_k + u_ks + theta_i + eta_ki)) for label k,
seed s and example i, with a seed effect u ~ N(0, seed_sd^2) per label and seed (training randomness), an example
difficulty theta ~ N(0, example_sd^2) that every label shares, and a label-by-example effect eta ~ N(0,
interaction_sd^2) (what one label finds hard and another not). Shared test rows: theta and eta are drawn once and
every seed is scored on them; fresh rows: each seed draws its own. A label's true accuracy is
E[sigmoid(mu_k + Z)], Z ~ N(0, seed_sd^2 + example_sd^2 + interaction_sd^2) (Gauss-Hermite quadrature); mu_k is
solved so that the true accuracies are exactly the ones asked for, so every true difference is known. With a
`failure_rate`, that share of seeds fails (its logits drop by `failure_shift`): heavy-tailed seeds, where a
t-test's normal reference is least safe.

`run_scenario` draws `replicates` families and runs the engine's variance model, corrections and verdicts on all
of them at once (the modules `variance`, `verdicts`; `attnbench.compare` runs the same functions per pair), and
returns the family-wise false-positive rate, the false discovery rate, the interval coverage, the power on the true
gaps and the rate of equivalence claims. `benchmarks/decisions_simulation.py` prints the full table.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
from scipy import optimize, special

from attnbench.decisions.corrections import planning_level
from attnbench.decisions.power import mde
from attnbench.decisions.variance import crossed, nested, over_seeds
from attnbench.decisions.verdicts import AHEAD, BEHIND, EQUIVALENT, decide

QUADRATURE = np.polynomial.hermite_e.hermegauss(64)  # nodes and weights for E[f(Z)], Z ~ N(0, 1)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One simulated setting: the labels' true accuracies, the design and sizes, and the noise scales (logits)."""

    accuracies: tuple[float, ...]
    seeds: int
    design: str = "shared"  # or "fresh"
    examples: int = 500
    outcomes: bool = True  # the engine is given the per-example outcomes (else the seeds' values only)
    seed_sd: float = 0.15
    example_sd: float = 1.5
    interaction_sd: float = 1.0
    margin: float = 0.01
    failure_rate: float = 0.0  # share of seeds whose training fails: every logit of that label and seed drops by
    failure_shift: float = 3.0  # this much (heavy-tailed seeds, as some committed runs show)

    @property
    def total_sd(self) -> float:
        return float(np.sqrt(self.seed_sd**2 + self.example_sd**2 + self.interaction_sd**2))


def true_accuracy(mu: np.ndarray, sd: float) -> np.ndarray:
    """E[sigmoid(mu + sd Z)], Z ~ N(0, 1), by Gauss-Hermite quadrature."""
    nodes, weights = QUADRATURE
    return special.expit(np.asarray(mu, dtype=float)[..., None] + sd * nodes) @ weights / weights.sum()


def logit_for(accuracy: float, sd: float, failure_rate: float = 0.0, failure_shift: float = 0.0) -> float:
    """The mu whose true accuracy is `accuracy`, a share `failure_rate` of seeds at mu - failure_shift (solved,
    scipy.optimize.brentq)."""

    def excess(mu: float) -> float:
        kept = true_accuracy(np.array(mu), sd)
        failed = true_accuracy(np.array(mu - failure_shift), sd)
        return float((1 - failure_rate) * kept + failure_rate * failed - accuracy)

    return float(optimize.brentq(excess, -30.0, 30.0))


def draw_outcomes(scenario: Scenario, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """0/1 outcomes (replicates, labels, seeds, examples) of the scenario's model."""
    k, s, n = len(scenario.accuracies), scenario.seeds, scenario.examples
    mu = np.array(
        [logit_for(a, scenario.total_sd, scenario.failure_rate, scenario.failure_shift) for a in scenario.accuracies]
    )
    per_seed = scenario.design == "fresh"
    theta = rng.normal(0.0, scenario.example_sd, (replicates, 1, s if per_seed else 1, n))
    eta = rng.normal(0.0, scenario.interaction_sd, (replicates, k, s if per_seed else 1, n))
    u = rng.normal(0.0, scenario.seed_sd, (replicates, k, s, 1))
    u -= scenario.failure_shift * (rng.random((replicates, k, s, 1)) < scenario.failure_rate)
    p = special.expit(mu[None, :, None, None] + u + theta + eta)
    return (rng.random(p.shape) < p).astype(np.float32)


@dataclasses.dataclass
class Rates:
    """What the engine claimed on one scenario, against the truth."""

    families: int
    any_false: float  # family-wise: share of families with at least one false ahead/behind
    false_discovery: float  # mean over families of false / max(1, claimed) ahead/behind
    coverage: float  # share of pairs whose interval holds the true difference
    power: float  # share of truly different pairs called in the right direction (NaN: none)
    equivalent_true: float  # share of pairs within the margin called equivalent (NaN: none)
    equivalent_false: float  # share of families with a pair outside the margin called equivalent
    mde: float  # median minimum detectable effect


def run_scenario(scenario: Scenario, replicates: int, correction: str, rng: np.random.Generator) -> Rates:
    """The engine on `replicates` families drawn from `scenario` (module docstring); chunked to bound memory."""
    pairs = list(itertools.combinations(range(len(scenario.accuracies)), 2))
    truth = np.array([scenario.accuracies[a] - scenario.accuracies[b] for a, b in pairs])
    chunk = max(1, 2_000_000 // (len(pairs) * scenario.seeds * scenario.examples))
    found = []
    for start in range(0, replicates, chunk):
        outcomes = draw_outcomes(scenario, min(chunk, replicates - start), rng)
        found.append(judge(scenario, outcomes, pairs, correction))
    verdict, low, high, power_mde = (np.concatenate(parts) for parts in zip(*found))
    detected = (verdict == AHEAD) | (verdict == BEHIND)
    right = np.where(truth > 0, verdict == AHEAD, verdict == BEHIND)
    false = detected & ((truth == 0) | ~right)
    within = np.abs(truth) < scenario.margin - 1e-12
    equivalent = verdict == EQUIVALENT
    return Rates(
        families=replicates,
        any_false=float(false.any(axis=1).mean()),
        false_discovery=float((false.sum(axis=1) / np.maximum(detected.sum(axis=1), 1)).mean()),
        coverage=float(((low <= truth) & (truth <= high)).mean()),
        power=float(right[:, truth != 0].mean()) if (truth != 0).any() else float("nan"),
        equivalent_true=float(equivalent[:, within].mean()) if within.any() else float("nan"),
        equivalent_false=float((equivalent & ~within).any(axis=1).mean()),
        mde=float(np.nanmedian(power_mde)),
    )


def judge(
    scenario: Scenario, outcomes: np.ndarray, pairs: list[tuple[int, int]], correction: str
) -> tuple[np.ndarray, ...]:
    """Verdicts and intervals (replicates, pairs) of one chunk, as `attnbench.compare` computes them per pair."""
    r, m = outcomes.shape[0], len(pairs)
    a, b = (np.array(side) for side in zip(*pairs))
    difference = (outcomes[:, a] - outcomes[:, b]).reshape(r * m, scenario.seeds, scenario.examples)
    if not scenario.outcomes:
        spread = over_seeds(difference.mean(axis=2))
    else:
        spread = (crossed if scenario.design == "shared" else nested)(difference)
    shape = (r, m)
    estimate, se, df = (x.reshape(shape) for x in (spread.mean, spread.se, spread.df))
    margin = np.full(m, scenario.margin)
    verdict, low, high = (np.empty(shape, dtype=object), np.empty(shape), np.empty(shape))
    for i in range(r):
        decided = decide(estimate[i], se[i], df[i], margin, True, 0.05, correction)
        verdict[i], low[i], high[i] = decided["verdict"], decided["low"], decided["high"]
    return verdict, low, high, mde(spread, planning_level(m, correction, 0.05)).reshape(shape)
