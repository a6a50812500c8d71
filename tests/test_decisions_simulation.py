"""The engine validated by simulation (issue 45): synthetic results with known effects, shared and fresh test
rows, 3 to 10 seeds. Family-wise error under Holm and false discovery rate under Benjamini-Hochberg at most 0.05
(within Monte-Carlo error), coverage at least 0.93, power that grows with seeds, equivalence claimed only where
the truth is within the margin. `benchmarks/decisions_simulation.py` prints the full table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnbench.decisions.simulation import Scenario, logit_for, run_scenario, true_accuracy

FAMILIES = 300
ALLOWANCE = 2.33 * math.sqrt(0.05 * 0.95 / FAMILIES)  # one-sided 99% Monte-Carlo error of a rate of 0.05


def test_the_simulated_labels_have_the_accuracies_asked_for() -> None:
    scenario = Scenario((0.8, 0.85), seeds=3)
    rng = np.random.default_rng(0)
    mu = logit_for(0.85, scenario.total_sd)
    assert math.isclose(true_accuracy(np.array(mu), scenario.total_sd), 0.85, abs_tol=1e-9)
    failing = logit_for(0.85, scenario.total_sd, failure_rate=0.2, failure_shift=3.0)
    mixed = 0.8 * true_accuracy(np.array(failing), scenario.total_sd) + 0.2 * true_accuracy(
        np.array(failing - 3.0), scenario.total_sd
    )
    assert math.isclose(mixed, 0.85, abs_tol=1e-9) and failing > mu
    z = rng.normal(0, scenario.total_sd, 2_000_000)
    assert abs(np.mean(1 / (1 + np.exp(-(mu + z)))) - 0.85) < 1e-3  # the quadrature against a plain draw


@pytest.mark.parametrize("design", ["shared", "fresh"])
@pytest.mark.parametrize("labels, seeds", [(15, 3), (10, 5), (5, 10)])
def test_holm_holds_the_family_wise_error_on_all_null_families(design: str, labels: int, seeds: int) -> None:
    rng = np.random.default_rng(labels * 100 + seeds)
    rates = run_scenario(Scenario((0.8,) * labels, seeds, design, examples=200), FAMILIES, "holm", rng)
    assert rates.any_false <= 0.05 + ALLOWANCE, rates
    assert rates.coverage >= 0.93, rates


@pytest.mark.parametrize("design", ["shared", "fresh"])
def test_holm_holds_with_heavy_tailed_seeds(design: str) -> None:
    """One seed in ten fails (its logits 3 lower): skewed seeds, where the t reference is least safe."""
    rng = np.random.default_rng(17)
    scenario = Scenario((0.8,) * 5, 5, design, examples=200, failure_rate=0.1)
    rates = run_scenario(scenario, FAMILIES, "holm", rng)
    assert rates.any_false <= 0.05 + ALLOWANCE and rates.coverage >= 0.93, rates


@pytest.mark.parametrize("design", ["shared", "fresh"])
def test_benjamini_hochberg_holds_the_false_discovery_rate(design: str) -> None:
    rng = np.random.default_rng(7)
    scenario = Scenario((0.85,) * 4 + (0.8,) * 4, 10, design, examples=200)
    rates = run_scenario(scenario, FAMILIES, "bh", rng)
    assert rates.false_discovery <= 0.05 + ALLOWANCE, rates
    assert rates.coverage >= 0.93 and rates.power > 0.3, rates


@pytest.mark.parametrize("design", ["shared", "fresh"])
def test_power_grows_with_seeds(design: str) -> None:
    rng = np.random.default_rng(11)
    power = [
        run_scenario(Scenario((0.85, 0.8), seeds, design, examples=200), 200, "holm", rng).power for seeds in (3, 5, 10)
    ]
    assert power[0] < power[1] < power[2] and power[2] > 0.5, power


@pytest.mark.parametrize("design", ["shared", "fresh"])
def test_equivalence_is_claimed_only_within_the_margin(design: str) -> None:
    rng = np.random.default_rng(13)
    quiet = {"seed_sd": 0.05, "examples": 400, "margin": 0.04}
    at_margin = run_scenario(Scenario((0.84, 0.8, 0.8), 10, design, **quiet), FAMILIES, "holm", rng)
    assert at_margin.equivalent_false <= 0.05 + ALLOWANCE, at_margin  # 0.84 vs 0.80 is not within 0.04
    same = [run_scenario(Scenario((0.8, 0.8), s, design, **quiet), 200, "holm", rng).equivalent_true for s in (3, 10)]
    assert same[0] < same[1] and same[1] > 0.3, same


def test_compare_draws_the_verdicts_the_simulation_measures() -> None:
    """The simulation runs the engine's functions on stacked families; `attnbench.compare` runs them per pair on a
    frame: the same verdicts and intervals."""
    import pandas as pd

    import attnbench
    from attnbench.decisions.simulation import draw_outcomes, judge

    rng = np.random.default_rng(5)
    for design in ("shared", "fresh"):
        scenario = Scenario((0.86, 0.8, 0.8, 0.79), 5, design, examples=300)
        outcomes = draw_outcomes(scenario, 1, rng)
        pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
        verdict, low, high, _ = judge(scenario, outcomes, pairs, "holm")
        frame = pd.DataFrame(
            [
                {
                    "task": "t",
                    "label": f"l{k}",
                    "seed": s,
                    "metric": "accuracy",
                    "value": float(y.mean()),
                    "outcomes": y.astype(float),
                    "test_rows": design,
                }  # fmt: skip
                for k, per_seed in enumerate(outcomes[0])
                for s, y in enumerate(per_seed)
            ]
        )
        table = attnbench.compare(frame, metric="accuracy", margin=scenario.margin)
        assert list(table["verdict"]) == list(verdict[0])
        assert np.allclose(table["low"], np.maximum(low[0], -1.0)) and np.allclose(
            table["high"], np.minimum(high[0], 1.0)
        )
