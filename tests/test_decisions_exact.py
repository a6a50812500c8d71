"""Exact metrics (`register_metric(..., exact=True)`: counts the code computes) in the engine: ordered by value, ties
sharing a rank, no interval, no rank set, no test; a pair differs (ahead / behind) or is equal (equivalent)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_decisions_compare import frame

import attnbench
from attnbench.decisions.constant import compare_to_value
from attnbench.measurements import measurement_names
from attnbench.metrics import METRICS, metric_exact, register_metric
from attnbench.report.inference import exact_text

# the decode run's state bytes at 16 tokens: one seed each, as counted (softmax's KV cache is the smallest there)
STATE = {"softmax": [16400.0], "elu-linear": [33280.0], "vanilla": [33280.0], "performer-256": [133128.0]}


@pytest.fixture
def tenths():
    """A counted ratio whose mean over seeds misses its value in the last bit (0.1 + 0.1 + 0.1 != 0.3)."""
    register_metric("counted_tenths", "min", "a test count", exact=True)
    yield "counted_tenths"
    METRICS.pop("counted_tenths")


def test_the_counted_metrics_are_declared_exact() -> None:
    measurement_names()
    counted = ["state_bytes@1024", "state_bytes_total@1024", "state_bytes", "params_total", "params_attention"]
    assert all(metric_exact(m) for m in counted + ["params_ratio", "num_kv_pairs", "layer_ratio"])
    measured = ["accuracy", "bits_per_byte", "decode_ms_per_token@1024", "forward_peak_mem_bytes@64", "rel_error"]
    assert not any(metric_exact(m) for m in measured)


def test_standings_rank_counts_by_value_with_ties_sharing_a_rank_and_no_interval() -> None:
    table = attnbench.standings(frame(STATE, metric="state_bytes@16"), metric="state_bytes@16").set_index("label")
    assert dict(table["rank"]) == {"softmax": 1, "elu-linear": 2, "vanilla": 2, "performer-256": 4}
    assert (table["rank_low"] == table["rank"]).all() and (table["rank_high"] == table["rank"]).all()
    assert table["low"].isna().all() and table["high"].isna().all()
    assert set(table.index[table["best_set"]]) == {"softmax"} and set(table["variance"]) == {"exact"}


def test_one_seed_is_enough_to_compare_counts() -> None:
    pairs = attnbench.compare(frame(STATE, metric="state_bytes@16"), metric="state_bytes@16")
    verdicts = {(r.label_a, r.label_b): r.verdict for r in pairs.itertuples()}
    assert verdicts[("elu-linear", "softmax")] == "behind"  # more bytes: worse, exactly
    assert verdicts[("performer-256", "vanilla")] == "behind"
    assert verdicts[("elu-linear", "vanilla")] == "equivalent"  # the same count
    row = pairs.set_index(["label_a", "label_b"]).loc[("elu-linear", "softmax")]
    assert row["estimate"] == 33280.0 - 16400.0 and math.isnan(row["p"]) and math.isnan(row["low"])
    assert (row["margin"], row["mde"], row["seeds_needed"], row["variance"]) == (0.0, 0.0, 1.0, "exact")
    assert row["note"] == ""  # no "one seed in common: no verdict"


def test_a_suite_margin_does_not_make_different_counts_equivalent() -> None:
    values = {"performer-64": [33288.0, 33288.0], "elu-linear": [33280.0, 33280.0]}
    pairs = attnbench.compare(frame(values, metric="state_bytes@16"), metric="state_bytes@16", margin=100.0)
    assert list(pairs["verdict"]) == ["ahead"] and list(pairs["estimate"]) == [-8.0]


def test_a_mean_that_misses_the_count_in_the_last_bit_is_still_equal(tenths: str) -> None:
    values = {"three": [0.1, 0.1, 0.1], "one": [0.1], "more": [0.2]}
    assert np.mean(values["three"]) != 0.1
    table = attnbench.standings(frame(values, metric=tenths), metric=tenths).set_index("label")
    assert dict(table["rank"]) == {"three": 1, "one": 1, "more": 3}
    pairs = attnbench.compare(frame(values, metric=tenths), metric=tenths).set_index(["label_a", "label_b"])
    assert pairs.loc[("one", "three"), "verdict"] == "equivalent" and pairs.loc[("one", "three"), "estimate"] == 0


def test_a_count_against_a_value_is_above_below_or_at_it() -> None:
    found = compare_to_value(frame(STATE, metric="state_bytes@16"), metric="state_bytes@16", value=33280.0)
    verdicts = dict(zip(found["label"], found["verdict"]))
    assert verdicts == {
        "elu-linear": "equivalent",
        "performer-256": "behind",
        "softmax": "ahead",
        "vanilla": "equivalent",
    }
    assert found["p"].isna().all() and set(found["variance"]) == {"exact"}


def test_pairs_without_a_seed_in_common_stay_undecided() -> None:
    pairs = attnbench.compare(
        frame({"a": [16400.0], "b": [float("nan"), 33280.0]}, metric="state_bytes@16"), metric="state_bytes@16"
    )
    assert list(pairs["verdict"]) == ["undecided"] and "no seed in common" in pairs["note"].iloc[0]


def test_a_table_shows_a_count_in_its_declared_format() -> None:
    """A count reads as a count (16, not 16.00; 132 bytes, not 132.0), each seed's value only where they differ."""
    assert exact_text("num_kv_pairs", 16.0, [16.0, 16.0, 16.0]) == "16"
    assert exact_text("state_bytes", 132.0, [132.0] * 3) == "132"
    assert exact_text("state_bytes_total", 1500.0, [1000.0, 2000.0]) == "1,500 (seeds 1,000 2,000)"
    assert exact_text("layer_ratio", 3.0) == "3" and exact_text("layer_ratio", 1 / 3) == "0.333"
    assert exact_text("state_bytes", float("nan")) == "—"
