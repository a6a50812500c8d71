"""attnbench.load_results: one row per cell and metric, counted by hand on written cells."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from report_fixture import write_cell

import attnbench


def test_load_results_has_one_row_per_cell_and_metric(tmp_path: Path) -> None:
    write_cell(tmp_path, label="a", task="t1", seed=0, metrics={"accuracy": 0.8, "ece": 0.05})
    write_cell(tmp_path, label="a", task="t1", seed=1, metrics={"accuracy": 0.7, "ece": 0.07})
    write_cell(tmp_path, label="b", task="t1", seed=0, status="failed", reason="boom")
    for trial, score in ((0, 0.6), (1, 0.9)):
        write_cell(
            tmp_path,
            label="c",
            task="t1",
            seed=0,
            metrics={"accuracy": score},
            details={"validation": {"accuracy": score}},
            sweep={"trial": trial, "values": {"lr": trial}, "metric": "accuracy"},
        )
    frame = attnbench.load_results(tmp_path)
    assert {"task", "label", "seed", "measurement", "status", "metric", "value"} <= set(frame.columns)
    assert len(frame) == 2 * 2 + 1 + 2  # a: 2 cells x 2 metrics; b: one row without metric; c: two trials
    a = frame[frame["label"] == "a"].set_index(["seed", "metric"])["value"]
    assert a[(0, "accuracy")] == pytest.approx(0.8) and a[(1, "ece")] == pytest.approx(0.07)
    (failed,) = frame[frame["label"] == "b"].itertuples()
    assert failed.status == "failed" and failed.reason == "boom" and pd.isna(failed.metric) and math.isnan(failed.value)
    c = frame[frame["label"] == "c"].set_index("trial")
    assert bool(c.at[1, "chosen"]) and not bool(c.at[0, "chosen"])  # trial 1 won on validation
    assert set(frame["measurement"]) == {"accuracy"} and set(frame["task"]) == {"t1"}
