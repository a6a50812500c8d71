"""A run folder read by the engine: per-example outcomes from stored predictions or outcomes, each task's test-row
design from its provenance or the task registry, a sweep's chosen trial only, the suite's margins."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from report_fixture import write_cell

import attnbench
from attnbench.decisions.outcomes import cell_outcomes
from attnbench.decisions.runs import read_run
from attnbench.predictions import decode_outcomes, encode_outcomes, encode_predictions


def _with_data(path: Path, **data: object) -> None:
    """Give a written cell the data provenance `attnbench.tasks.load_task` records."""
    stored = json.loads(path.read_text())
    stored["provenance"]["data"] = data
    path.write_text(json.dumps(stored))


def _plan(run: Path, **keys: object) -> None:
    planned = sorted(p.stem for p in (run / "cells").glob("*.json"))
    suite = {"name": "t", **keys}
    (run / "run.json").write_text(json.dumps({"schema": 1, "suite": "t", "resolved_suite": suite, "cell_ids": planned}))


def _classifier_run(run: Path) -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 200)
    for label, skill in (("a", 0.9), ("b", 0.7)):
        for seed in range(3):
            correct = rng.random(200) < skill
            probs = np.where(correct[:, None] == (np.arange(2)[None] == labels[:, None]), 0.8, 0.2)
            path = write_cell(
                run,
                label=label,
                task="rotten_tomatoes",
                seed=seed,
                metrics={"accuracy": float(correct.mean()), "ece": 0.1 + 0.01 * seed},
                details={"predictions": encode_predictions(probs, labels)},
            )
            _with_data(path, task="rotten_tomatoes", options={"seed": seed})


def test_a_classifier_run_is_read_with_its_per_example_outcomes(tmp_path: Path) -> None:
    _classifier_run(tmp_path)
    _plan(tmp_path, comparisons={"pairs": ["default"], "margin": {"accuracy": 0.05}})
    frame, settings = read_run(tmp_path)
    accuracy = frame[frame["metric"] == "accuracy"]
    assert all(o is not None and len(o) == 200 for o in accuracy["outcomes"])
    assert all(o is None for o in frame.loc[frame["metric"] == "ece", "outcomes"])  # not a mean over examples
    assert set(frame["test_rows"]) == {"shared"} and settings.margin("accuracy") == 0.05
    row = attnbench.compare(tmp_path, metric="accuracy").iloc[0]
    assert (row.variance, row.n_examples, row.margin, row.design) == ("seeds and examples", 200, 0.05, "shared")
    assert attnbench.compare(tmp_path, metric="accuracy", margin=0.02).iloc[0].margin == 0.02


def test_the_design_comes_from_the_provenance_then_the_registry(tmp_path: Path) -> None:
    for seed in range(3):
        for label in ("a", "b"):
            path = write_cell(tmp_path, label=label, task="listops", seed=seed, metrics={"accuracy": 0.3 + seed / 10})
            _with_data(path, task="listops", options={"seed": seed})
    frame, _ = read_run(tmp_path)
    assert set(frame["test_rows"]) == {"fresh"}  # listops draws its rows from the seed (TaskConfig.test_rows)
    one_draw = tmp_path / "fixed"
    for seed in range(2):
        path = write_cell(one_draw, label="a", task="listops", seed=seed, metrics={"accuracy": 0.3})
        _with_data(path, task="listops", options={"seed": 7})
    assert set(read_run(one_draw)[0]["test_rows"]) == {"shared"}  # every seed ran on one data draw
    stored = tmp_path / "stored"
    path = write_cell(stored, label="a", task="listops", metrics={"accuracy": 0.3})
    _with_data(path, task="listops", test_rows="shared", options={"seed": 0})
    assert set(read_run(stored)[0]["test_rows"]) == {"shared"}


def test_only_the_chosen_sweep_trial_is_compared(tmp_path: Path) -> None:
    for seed in range(3):
        for trial, value in ((0, 0.5), (1, 0.9)):
            write_cell(
                tmp_path,
                label="a",
                seed=seed,
                metrics={"accuracy": value + seed / 100},
                details={"validation": {"accuracy": value}},
                sweep={"trial": trial, "values": {"lr": trial}, "metric": "accuracy"},
            )
        write_cell(tmp_path, label="b", seed=seed, metrics={"accuracy": 0.7 + seed / 50})
    table = attnbench.standings(tmp_path, metric="accuracy").set_index("label")
    assert np.isclose(table.loc["a", "mean"], 0.91)


def test_stored_outcomes_round_trip_and_must_average_to_the_metric() -> None:
    values = np.array([0.25, 0.5, 1.0, 0.75])
    stored = encode_outcomes(values)
    assert np.array_equal(decode_outcomes(json.loads(json.dumps(stored))), values)
    assert np.array_equal(cell_outcomes({"outcomes": {"accuracy": stored}}, "accuracy", 0.625), values)
    assert cell_outcomes({"outcomes": {"accuracy": stored}}, "accuracy", 0.7) is None  # another split's numbers
    assert cell_outcomes({"outcomes": {"accuracy": {"encoding": "?"}}}, "accuracy", 0.625) is None
