"""Labels against a known value (the chance rate): above it, at it within the margin, or undetermined."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from attnbench.decisions.constant import compare_to_value


def _frame(rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for label, rate, seeds in (("chance", 0.5, 10), ("skilled", 0.7, 3), ("unsure", 0.52, 2)):
        for seed in range(seeds):
            correct = (rng.random(4000 if label == "chance" else 200) < rate).astype(float)
            rows.append({"task": "t", "label": label, "seed": seed, "metric": "accuracy",
                         "value": correct.mean(), "outcomes": correct, "test_rows": "fresh"})  # fmt: skip
    return pd.DataFrame(rows)


def test_at_above_and_undetermined_against_the_chance_rate() -> None:
    table = compare_to_value(_frame(np.random.default_rng(0)), metric="accuracy", value=0.5, margin=0.02)
    verdicts = dict(zip(table["label"], table["verdict"]))
    assert verdicts == {"chance": "equivalent", "skilled": "ahead", "unsure": "undecided"}
    assert (table["low"] >= -0.5).all() and (table["high"] <= 0.5).all()  # inside the range accuracy - 0.5 can take


def test_one_label_is_the_one_sample_t_test_on_its_seeds() -> None:
    values = [0.61, 0.58, 0.66, 0.6]
    data = pd.DataFrame(
        [{"task": "t", "label": "a", "seed": s, "metric": "accuracy", "value": v} for s, v in enumerate(values)]
    )
    row = compare_to_value(data, metric="accuracy", value={"t": 0.5}).iloc[0]
    assert np.isclose(row.p, stats.ttest_1samp(values, 0.5).pvalue) and row.verdict == "ahead"
    assert np.isclose(row.estimate, np.mean(values) - 0.5)


def test_a_published_value_from_one_run_carries_a_seed_s_spread() -> None:
    """value_seeds=1: the published number is one draw of the same training: the prediction-interval t-test."""
    values = [0.61, 0.58, 0.66, 0.6]
    data = pd.DataFrame(
        [{"task": "t", "label": "a", "seed": s, "metric": "accuracy", "value": v} for s, v in enumerate(values)]
    )
    row = compare_to_value(data, metric="accuracy", value=0.55, value_seeds=1).iloc[0]
    sd = np.std(values, ddof=1)
    t = (np.mean(values) - 0.55) / (sd * np.sqrt(1 / 4 + 1))
    assert np.isclose(row.p, 2 * stats.t.sf(abs(t), 3))
    assert row.p > compare_to_value(data, metric="accuracy", value=0.55).iloc[0].p  # exact: narrower, smaller p
