"""Quality against cost: the front is made of the labels no other label beats on both axes, by verdicts checked
against an independent computation (paired t-tests over seeds by scipy, Holm's correction by statsmodels)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from report_fixture import write_cell
from scipy import stats
from statsmodels.stats.multitest import multipletests

from attnbench.report.load import load_runs
from attnbench.report.quality_cost import quality_cost_rows

# five seeds: "fast" is accurate and quick, "slow" is behind it on both, "big" is the most accurate but slowest
ACCURACY = {"fast": [0.80, 0.81, 0.80, 0.82, 0.81], "slow": [0.70, 0.71, 0.69, 0.70, 0.72],
            "big": [0.90, 0.91, 0.90, 0.92, 0.89]}  # fmt: skip
SECONDS = {"fast": [10.0, 10.5, 9.8, 10.2, 10.1], "slow": [30.0, 29.0, 31.0, 30.5, 29.5],
           "big": [60.0, 61.0, 59.0, 60.5, 59.5]}  # fmt: skip
STATE = {"fast": 100.0, "slow": 200.0, "big": 5000.0}


def _beats(values: dict[str, list[float]], higher_is_better: bool) -> set[tuple[str, str]]:
    """(winner, loser) pairs by paired t-tests over seeds with Holm's correction, computed apart from the engine."""
    pairs = list(itertools.combinations(sorted(values), 2))
    p = [stats.ttest_rel(values[a], values[b]).pvalue for a, b in pairs]
    out = set()
    for (a, b), detected in zip(pairs, multipletests(p, method="holm")[0]):
        if detected:
            a_higher = np.mean(values[a]) > np.mean(values[b])
            out.add((a, b) if a_higher == higher_is_better else (b, a))
    return out


def test_the_front_is_the_labels_no_other_beats_on_both_axes(tmp_path: Path) -> None:
    for label in ACCURACY:
        for seed in range(5):
            metrics = {
                "accuracy": ACCURACY[label][seed],
                "train_seconds": SECONDS[label][seed],
                "state_bytes": STATE[label],
            }
            write_cell(tmp_path, label=label, task="t", seed=seed, metrics=metrics)
    rows = quality_cost_rows(load_runs([tmp_path]))
    better, quicker = _beats(ACCURACY, True), _beats(SECONDS, False)
    time_rows = rows[rows["cost"] == "training time"].set_index("label")
    for label in ACCURACY:
        by = sorted(m for m in ACCURACY if (m, label) in better and (m, label) in quicker)
        shown = time_rows.at[label, "beaten_by"]
        assert time_rows.at[label, "front"] == (not by) and (shown if isinstance(shown, str) else "") == ", ".join(by)
    assert set(time_rows.index[time_rows["front"]]) == {"fast", "big"}  # slow: behind fast on both
    state_rows = rows[rows["cost"] == "state bytes"].set_index("label")  # counted: only a smaller state beats
    assert (
        set(state_rows.index[state_rows["front"]]) == {"fast", "big"} and state_rows.at["slow", "beaten_by"] == "fast"
    )
    lows = time_rows["quality_low"]
    assert (lows <= time_rows["quality_mean"]).all() and (time_rows["cost_low"] <= time_rows["cost_mean"]).all()
