"""The inference engine's error rates on synthetic results with known effects: the table docs/decisions.md quotes.

    python benchmarks/decisions_simulation.py [--families 1000] [--examples 500] [--seed 0]

Per design (shared or fresh test rows), number of seeds (3, 5, 10) and scenario, the engine's verdicts on
simulated families (`attnbench.decisions.simulation`): family-wise false-positive rate under Holm on all-null
families of 5 and 15 labels, false discovery rate under Benjamini-Hochberg on a family of 10 with half the labels
5 points ahead, coverage of the intervals, power on 1- and 5-point gaps, equivalence claims where the truth lies
at the margin (false) and at 0 (true), and the median minimum detectable effect. The "seeds only" rows give the
engine no per-example outcomes: on shared rows they leave out the test set's sampling error. A second table
repeats the family-wise error, coverage and power with heavy-tailed seeds (10% or 30% of seeds fail).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd

from attnbench.decisions.simulation import Scenario, run_scenario

SEEDS = (3, 5, 10)
NULL_5, NULL_15 = (0.8,) * 5, (0.8,) * 15
HALF_AHEAD = (0.85,) * 5 + (0.8,) * 5
QUIET = {"seed_sd": 0.05, "margin": 0.04}  # a setting where equivalence within 0.04 can be shown


def row(design: str, outcomes: bool, seeds: int, families: int, examples: int, rng: np.random.Generator) -> dict:
    """Every rate of one design, outcome setting and seed count."""

    def rates(accuracies: tuple[float, ...], correction: str, **extra: float):
        scenario = Scenario(accuracies, seeds, design, examples=examples, outcomes=outcomes, **extra)
        return run_scenario(scenario, families, correction, rng)

    null5, null15 = rates(NULL_5, "holm"), rates(NULL_15, "holm")
    mixed = rates(HALF_AHEAD, "bh")
    gap1, gap5 = rates((0.81, 0.8), "holm"), rates((0.85, 0.8), "holm")
    at_margin, same = rates((0.84, 0.8), "holm", **QUIET), rates((0.8, 0.8), "holm", **QUIET)
    return {
        "design": design,
        "variance": "seeds and examples" if outcomes else "seeds only",
        "seeds": seeds,
        "FWER holm, 5 null": null5.any_false,
        "FWER holm, 15 null": null15.any_false,
        "FDR bh, 5 of 10 +5pt": mixed.false_discovery,
        "coverage (min)": min(r.coverage for r in (null5, null15, mixed, gap1, gap5)),
        "power 1pt": gap1.power,
        "power 5pt": gap5.power,
        "power 5pt (bh, 10 labels)": mixed.power,
        "equiv. at margin (false)": at_margin.equivalent_false,
        "equiv. at 0 (true)": same.equivalent_true,
        "mde (2 labels)": gap5.mde,
    }


def heavy_row(design: str, seeds: int, rate: float, families: int, examples: int, rng: np.random.Generator) -> dict:
    """Family-wise error, coverage and power when a share `rate` of seeds fails (heavy-tailed seeds)."""

    def rates(accuracies: tuple[float, ...]):
        scenario = Scenario(accuracies, seeds, design, examples=examples, failure_rate=rate)
        return run_scenario(scenario, families, "holm", rng)

    null5, gap5 = rates(NULL_5), rates((0.85, 0.8))
    return {
        "design": design,
        "seeds": seeds,
        "failing seeds": rate,
        "FWER holm, 5 null": null5.any_false,
        "coverage (min)": min(null5.coverage, gap5.coverage),
        "power 5pt": gap5.power,
    }


def markdown(table: pd.DataFrame) -> str:
    """The table as Markdown, rates to 3 decimals."""
    cells = [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in r] for r in table.itertuples(index=False)]
    lines = [list(table.columns), ["---"] * len(table.columns), *cells]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", type=int, default=1000, help="simulated families per scenario")
    parser.add_argument("--examples", type=int, default=500, help="test examples per seed")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    settings = [(d, o, s) for d in ("shared", "fresh") for o in (True, False) for s in SEEDS]
    rows = []
    for i, (design, outcomes, seeds) in enumerate(settings, 1):
        rows.append(row(design, outcomes, seeds, args.families, args.examples, rng))
        elapsed = time.perf_counter() - start
        eta = elapsed / i * (len(settings) - i)
        print(
            f"[{i}/{len(settings)}] {design}, {seeds} seeds: {elapsed:.0f} s, about {eta:.0f} s left", file=sys.stderr
        )
    table = pd.DataFrame(rows)
    print(
        f"{args.families} families per scenario, {args.examples} test examples, seed {args.seed}; "
        f"{time.perf_counter() - start:.0f} s"
    )
    print(markdown(table))
    heavy = [
        heavy_row(design, seeds, rate, args.families, args.examples, rng)
        for design in ("shared", "fresh")
        for seeds in SEEDS
        for rate in (0.1, 0.3)
    ]
    print("\nHeavy-tailed seeds: a share of seeds fails (every logit of that label and seed 3 lower); outcomes stored")
    print(markdown(pd.DataFrame(heavy)))


if __name__ == "__main__":
    main()
