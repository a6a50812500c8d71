"""`attnbench.compare` on results frames: the contract's columns, the verdicts, and the degenerate cases (issue 48
item 5: coincident seeds, NaN seeds, one finite seed)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import attnbench
from attnbench.decisions.pairwise import COLUMNS
from attnbench.errors import ConfigError, UserError

CONTRACT = [
    "task",
    "metric",
    "label_a",
    "label_b",
    "n_seeds",
    "estimate",
    "low",
    "high",
    "p",
    "p_adjusted",
    "verdict",
    "margin",
    "mde",
    "seeds_needed",
]


def frame(values: dict[str, list[float]], task: str = "t", metric: str = "accuracy") -> pd.DataFrame:
    """Long results frame: one row per label and seed."""
    return pd.DataFrame(
        [
            {"task": task, "label": label, "seed": seed, "metric": metric, "value": value}
            for label, seeds in values.items()
            for seed, value in enumerate(seeds)
        ]
    )


def test_the_columns_are_the_contract_and_attnbench_exports_it() -> None:
    table = attnbench.compare(frame({"a": [0.8, 0.82, 0.81], "b": [0.7, 0.71, 0.69]}), metric="accuracy")
    assert list(table.columns[: len(CONTRACT)]) == CONTRACT == COLUMNS
    row = table.iloc[0]
    assert (row.label_a, row.label_b, row.n_seeds, row.margin) == ("a", "b", 3, 0.01)  # the declared margin
    assert row.verdict == "ahead" and row.low > 0  # one pair: no correction to pay
    assert math.isclose(row.estimate, np.mean([0.1, 0.11, 0.12]))


def test_one_pair_is_the_paired_t_test() -> None:
    a, b = [0.81, 0.79, 0.84, 0.8], [0.78, 0.8, 0.79, 0.77]
    row = attnbench.compare(frame({"a": a, "b": b}), metric="accuracy", margin=0.0).iloc[0]
    expected = stats.ttest_rel(a, b)
    assert math.isclose(row.p, expected.pvalue) and math.isclose(row.p_adjusted, expected.pvalue)
    low, high = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert math.isclose(row.low, low) and math.isclose(row.high, high)


def test_lower_is_better_flips_ahead_and_behind() -> None:
    data = frame({"a": [0.5, 0.52, 0.51], "b": [0.7, 0.71, 0.69]}, metric="nll")
    assert attnbench.compare(data, metric="nll").iloc[0].verdict == "ahead"  # lower nll: a ahead
    assert attnbench.compare(data, metric="nll", higher_is_better=True).iloc[0].verdict == "behind"


def test_holm_widens_the_family_and_bh_is_between() -> None:
    rng = np.random.default_rng(0)
    values = {f"l{i:02d}": list(0.8 + 0.004 * i + rng.normal(0, 0.01, 5)) for i in range(8)}
    results = {c: attnbench.compare(frame(values), metric="accuracy", correction=c) for c in ("none", "bh", "holm")}
    assert len(results["holm"]) == 28
    widths = {c: (t["high"] - t["low"]).mean() for c, t in results.items()}
    assert widths["none"] < widths["bh"] <= widths["holm"]
    assert (results["holm"]["p_adjusted"] >= results["bh"]["p_adjusted"] - 1e-12).all()
    assert (results["none"]["p_adjusted"] == results["none"]["p"]).all()


def test_equivalence_needs_the_interval_inside_the_margin() -> None:
    close = frame({"a": [0.800, 0.801, 0.8005, 0.7995], "b": [0.8, 0.8002, 0.8001, 0.7999]})
    row = attnbench.compare(close, metric="accuracy").iloc[0]
    assert row.verdict == "equivalent" and -0.01 < row.low and row.high < 0.01
    assert attnbench.compare(close, metric="accuracy", margin=0.0005).iloc[0].verdict == "undecided"


def test_reference_and_given_pairs_make_the_family() -> None:
    data = frame({"a": [0.8, 0.81, 0.79], "b": [0.7, 0.72, 0.71], "ref": [0.6, 0.61, 0.62]})
    against = attnbench.compare(data, metric="accuracy", reference="ref")
    assert list(zip(against.label_a, against.label_b)) == [("a", "ref"), ("b", "ref")]
    given = attnbench.compare(data, metric="accuracy", pairs=[("b", "a")])
    assert list(zip(given.label_a, given.label_b)) == [("b", "a")] and given.iloc[0].verdict == "behind"
    with pytest.raises(UserError, match="reference 'nope'"):
        attnbench.compare(data, metric="accuracy", reference="nope")


def test_a_bounded_metric_keeps_its_interval_inside_the_range() -> None:
    row = attnbench.compare(frame({"a": [1.0, 0.2, 1.0], "b": [0.0, 0.9, 0.1]}), metric="accuracy").iloc[0]
    assert -1.0 <= row.low and row.high <= 1.0


def test_coincident_seeds_give_no_interval_and_no_winner() -> None:
    row = attnbench.compare(frame({"a": [0.9, 0.92, 0.95], "b": [0.88, 0.9, 0.93]}), metric="accuracy").iloc[0]
    assert row.verdict == "undecided" and math.isnan(row.low) and math.isnan(row.p)
    assert "coincident" in row.note


def test_a_nan_seed_is_reported_and_left_out() -> None:
    data = frame({"a": [0.8, 0.81, float("nan"), 0.82], "b": [0.7, 0.72, 0.71, 0.7]})
    row = attnbench.compare(data, metric="accuracy").iloc[0]
    assert row.n_seeds == 3 and row.values_a == (0.8, 0.81, 0.82)
    assert "a: seed 2 is not a number: left out" in row.note


def test_one_finite_seed_gives_no_verdict() -> None:
    data = frame({"a": [0.9, float("nan")], "b": [0.1, 0.2]})
    row = attnbench.compare(data, metric="accuracy").iloc[0]
    assert row.n_seeds == 1 and row.verdict == "undecided" and math.isnan(row.p) and math.isnan(row.mde)
    assert "one seed" in row.note


def test_bad_input_is_refused_with_what_to_do() -> None:
    data = frame({"a": [0.8, 0.81], "b": [0.7, 0.72]})
    with pytest.raises(UserError, match="no results for metric 'f1'; the results hold: accuracy"):
        attnbench.compare(data, metric="f1")
    with pytest.raises(UserError, match="declares no direction"):
        attnbench.compare(frame({"a": [1, 2], "b": [2, 3]}, metric="params_total"), metric="params_total")
    with pytest.raises(UserError, match="lacks the columns"):
        attnbench.compare(data.drop(columns="seed"), metric="accuracy")
    with pytest.raises(UserError, match="share a task, label and seed"):
        attnbench.compare(pd.concat([data, data]), metric="accuracy")
    two = pd.concat([data.assign(measurement="accuracy"), data.assign(measurement="robustness", value=0.5)])
    assert attnbench.compare(two, metric="accuracy", measurement="accuracy").iloc[0].estimate > 0.05
    with pytest.raises(UserError, match="no results of measurement 'lm'; the results hold: accuracy, robustness"):
        attnbench.compare(two, metric="accuracy", measurement="lm")
    with pytest.raises(UserError, match="outcomes must be a 1-D array"):
        attnbench.compare(data.assign(outcomes=[[0.5, np.nan]] * len(data)), metric="accuracy")
    with pytest.raises(UserError, match="the outcomes average 0.5, the value is 0.8"):
        attnbench.compare(data.assign(outcomes=[[0.0, 1.0]] * len(data)), metric="accuracy")
    with pytest.raises(ConfigError, match="correction=.sidak."):
        attnbench.compare(data, metric="accuracy", correction="sidak")  # type: ignore[arg-type]


def test_per_example_outcomes_add_the_shared_test_set_to_the_variance() -> None:
    rng = np.random.default_rng(3)
    hard = rng.random(300) < 0.3  # both labels fail the same hard rows: a shared test set
    rows = []
    for label, skill in (("a", 0.9), ("b", 0.8)):
        for seed in range(4):
            correct = (~hard & (rng.random(300) < skill)).astype(float)
            rows.append({"task": "t", "label": label, "seed": seed, "metric": "accuracy",
                         "value": correct.mean(), "outcomes": correct, "test_rows": "shared"})  # fmt: skip
    data = pd.DataFrame(rows)
    with_examples = attnbench.compare(data, metric="accuracy").iloc[0]
    as_lists = attnbench.compare(data.assign(outcomes=[list(o) for o in data["outcomes"]]), metric="accuracy")
    assert as_lists.iloc[0].p == with_examples.p
    seeds_only = attnbench.compare(data.drop(columns="outcomes"), metric="accuracy").iloc[0]
    assert (with_examples.variance, seeds_only.variance) == ("seeds and examples", "seeds")
    assert with_examples.n_examples == 300 and with_examples.estimate == seeds_only.estimate
