"""`attnbench.standings`: ranks that follow the means, rank bounds and the best set from corrected pairwise tests."""

from __future__ import annotations

import math

import numpy as np
from test_decisions_compare import frame

import attnbench

COLUMNS = ["task", "label", "n_seeds", "mean", "low", "high", "rank", "rank_low", "rank_high", "best_set"]


def test_a_lower_mean_is_never_ranked_above_a_higher_one() -> None:
    # 'wild' has the higher mean but a wide spread (issue 45: ELU-linear-d128 in the bold top group, retention 8th)
    values = {"steady": [0.98, 0.985, 0.99], "wild": [0.33, 0.27, 0.74], "low": [0.1, 0.12, 0.11]}
    table = attnbench.standings(frame(values), metric="accuracy")
    assert list(table.columns[: len(COLUMNS)]) == COLUMNS
    ranks = dict(zip(table["label"], table["rank"]))
    assert ranks == {"steady": 1, "wild": 2, "low": 3} and list(table["label"]) == ["steady", "wild", "low"]
    assert (table["rank_low"] <= table["rank"]).all() and (table["rank"] <= table["rank_high"]).all()


def test_the_best_set_holds_the_labels_nothing_beats() -> None:
    values = {"a": [0.90, 0.91, 0.905, 0.9], "b": [0.905, 0.9, 0.91, 0.9], "c": [0.5, 0.51, 0.52, 0.5]}
    table = attnbench.standings(frame(values), metric="accuracy").set_index("label")
    assert set(table.index[table["best_set"]]) == {"a", "b"}
    assert (table.loc["c", "rank_low"], table.loc["c", "rank_high"]) == (3, 3)
    assert (table.loc["a", "rank_low"], table.loc["a", "rank_high"]) == (1, 2)


def test_intervals_of_a_bounded_metric_stay_in_its_range_and_show_the_seeds() -> None:
    table = attnbench.standings(frame({"g": [0.99, 0.97, 1.0], "h": [0.5, 0.6, 0.55]}), metric="accuracy")
    row = table.set_index("label").loc["g"]
    assert row["high"] == 1.0 and 0.9 < row["low"] < 0.99  # a t-interval would reach past 1
    assert row["values"] == (0.99, 0.97, 1.0) and row["seeds"] == (0, 1, 2)


def test_degenerate_labels_are_reported_not_ranked_on_air() -> None:
    values = {"same": [0.9, 0.9, 0.9], "nan": [0.95, float("nan"), float("nan")], "ok": [0.5, 0.52, 0.51]}
    table = attnbench.standings(frame(values), metric="accuracy").set_index("label")
    assert math.isnan(table.loc["same", "low"]) and "coincident" in table.loc["same", "note"]
    one = table.loc["nan"]
    assert one["n_seeds"] == 1 and math.isnan(one["low"]) and "seed 1 is not a number" in one["note"]
    assert one["rank_low"] == 1 and one["rank_high"] == 3  # one seed: any place
    assert bool(one["best_set"])  # nothing detectably beats it: it may be the best


def test_lower_is_better_ranks_the_smallest_first() -> None:
    rng = np.random.default_rng(0)
    values = {f"l{i}": list(1.0 + i + rng.normal(0, 0.01, 3)) for i in range(3)}
    table = attnbench.standings(frame(values, metric="bits_per_byte"), metric="bits_per_byte")
    assert list(table["label"]) == ["l0", "l1", "l2"] and list(table["best_set"]) == [True, False, False]
