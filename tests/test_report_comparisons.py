"""The paired, published and sweep tables and the reference marks, on hand-made cells with known answers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from report_fixture import write_cell
from scipy import stats as scipy_stats
from statsmodels.formula.api import ols
from statsmodels.stats.anova import anova_lm
from statsmodels.stats.multitest import multipletests

from attnbench.predictions import encode_predictions
from attnbench.report import write_report
from attnbench.report.load import load_runs
from attnbench.report.paired import paired_comparison_table, resolve_pairs
from attnbench.report.published import published_table
from attnbench.report.sweep import sweep_table
from attnbench.report.tables import leaderboard_table, task_table
from attnbench.sweep import best_trial

N = 400


def _plan(run: Path, **keys: Any) -> None:
    """A run.json whose normalised suite carries the comparison keys and plans every cell written so far."""
    run.mkdir(parents=True, exist_ok=True)
    planned = sorted(p.stem for p in (run / "cells").glob("*.json"))
    (run / "run.json").write_text(
        json.dumps({"schema": 1, "suite": "t", "resolved_suite": {"name": "t", **keys}, "cell_ids": planned})
    )


def _probs(labels: np.ndarray, correct: np.ndarray, confidence: float) -> np.ndarray:
    """Binary probabilities that put `confidence` on the label where `correct`, else on the other class."""
    top = np.where(correct, labels, 1 - labels)
    probs = np.full((len(labels), 2), 1 - confidence)
    probs[np.arange(len(labels)), top] = confidence
    return probs


def _cell(
    run: Path,
    label: str,
    seed: int,
    labels: np.ndarray,
    correct: np.ndarray,
    attention: str = "performer",
    **extra: Any,
) -> None:
    probs = _probs(labels, correct, 0.8)
    write_cell(
        run,
        label=label,
        attention=attention,
        task="rt",
        seed=seed,
        metrics={"accuracy": float(correct.mean()), "nll": float(-np.log(np.where(correct, 0.8, 0.2)).mean())},
        details={"predictions": encode_predictions(probs, labels), **extra.pop("details", {})},
        **extra,
    )


@pytest.fixture
def paired_run(tmp_path: Path) -> tuple[Path, dict]:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, size=N)
    truth = {}
    for seed in (0, 1, 2):
        a = rng.random(N) < 0.80
        b = rng.random(N) < 0.70
        truth[seed] = (a, b)
        _cell(tmp_path, "kernel-x", seed, labels, a)
        _cell(tmp_path, "vanilla-x", seed, labels, b)
        _cell(tmp_path, "softmax", seed, labels, a.copy(), attention="softmax")  # identical to kernel-x
    _plan(tmp_path)
    return tmp_path, truth


def crossed_p(a: np.ndarray, b: np.ndarray) -> float:
    """Independently of the engine: the two-way random-effects model of shared test rows (seed x example ANOVA by
    statsmodels), Var(mean) = (MS_seed + MS_example - MS_residual) / (N S) floored at max(MS_seed, MS_example) /
    (N S), Student's t with S - 1 degrees of freedom (docs/decisions.md)."""
    d = a.astype(float) - b.astype(float)  # (S, N)
    s, n = d.shape
    long = pd.DataFrame({"y": d.ravel(), "seed": np.repeat(np.arange(s), n), "row": np.tile(np.arange(n), s)})
    table = anova_lm(ols("y ~ C(seed) + C(row)", long).fit())
    ms_seed, ms_row, ms_res = table["mean_sq"]
    se = np.sqrt(max(ms_seed + ms_row - ms_res, ms_seed, ms_row) / (n * s))
    return float(2 * scipy_stats.t.sf(abs(d.mean()) / se, s - 1))


def test_paired_table_against_scipy_and_statsmodels(paired_run: tuple[Path, dict]) -> None:
    run, truth = paired_run
    table = paired_comparison_table(load_runs([run]))
    data = table.data[table.data["metric"] == "accuracy"].set_index(["label_a", "label_b"])
    a, b = (np.stack([truth[s][i] for s in (0, 1, 2)]) for i in (0, 1))
    row = data.loc[("kernel-x", "vanilla-x")]
    assert row["n_seeds"] == 3 and row["estimate"] == pytest.approx((a.mean(axis=1) - b.mean(axis=1)).mean())
    assert row["p"] == pytest.approx(crossed_p(a, b), rel=1e-9)
    p = [crossed_p(a, b), np.nan, crossed_p(b, a)]  # kernel-x - softmax: identical, no test
    expected = multipletests([p[0], p[2]], method="holm")[1]
    assert data["p_adjusted"].loc[[("kernel-x", "vanilla-x"), ("vanilla-x", "softmax")]].tolist() == pytest.approx(
        expected
    )
    assert row["verdict"] == ("ahead" if expected[0] < 0.05 else "undecided")
    assert "Holm" in " ".join(table.notes) and "±0.010" in " ".join(table.notes)


def test_identical_models_get_no_verdict_either_way(paired_run: tuple[Path, dict]) -> None:
    table = paired_comparison_table(load_runs([paired_run[0]]))
    same = table.data[(table.data["label_a"] == "kernel-x") & (table.data["label_b"] == "softmax")]
    assert set(same["metric"]) == {"accuracy", "nll"}  # the paired metrics the cells have
    assert (same["estimate"] == 0).all() and same["p"].isna().all()
    assert set(same["verdict"]) == {"undecided"} and same["note"].str.contains("coincident").all()


def test_suite_pairs_replace_the_default_pairs(paired_run: tuple[Path, dict]) -> None:
    run, _ = paired_run
    _plan(run, comparisons=[["vanilla-x", "kernel-x"]])
    table = paired_comparison_table(load_runs([run]))
    assert set(zip(table.data["label_a"], table.data["label_b"])) == {("vanilla-x", "kernel-x")}
    assert resolve_pairs(
        ["default", ["softmax", "kernel-x"], ["vanilla-x", "kernel-x"]], ["kernel-x", "softmax", "vanilla-x"]
    ) == [("kernel-x", "vanilla-x"), ("kernel-x", "softmax"), ("vanilla-x", "softmax")]  # each pair once
    assert resolve_pairs([["softmax", "kernel-x"]], ["kernel-x", "softmax"]) == [("softmax", "kernel-x")]


def test_suite_margin_and_correction_are_the_tables(paired_run: tuple[Path, dict]) -> None:
    run, _ = paired_run
    _plan(run, comparisons={"pairs": ["default"], "margin": {"accuracy": 0.5}, "correction": "none"})
    table = paired_comparison_table(load_runs([run]))
    row = table.data[(table.data["label_a"] == "kernel-x") & (table.data["label_b"] == "vanilla-x")]
    assert (row["correction"] == "none").all() and row.loc[row["metric"] == "accuracy", "margin"].item() == 0.5
    assert "±0.500 (the suite's)" in " ".join(table.notes) and "no multiple-comparison correction" in " ".join(
        table.notes
    )


def test_paired_and_published_tables_in_every_format_and_the_page(paired_run: tuple[Path, dict]) -> None:
    _plan(
        paired_run[0],
        published=[{"source": "Table 3", "task": "rt", "note": "", "values": {"softmax": {"accuracy": 0.7}}}],
    )
    report = write_report(paired_run[0])
    for name in ("paired", "published"):
        for suffix in ("md", "csv", "tex"):
            assert (report / "tables" / f"{name}.{suffix}").is_file()
        assert f'id="table-{name}"' in (report / "index.html").read_text()


def test_published_values_carry_our_seed_spread(tmp_path: Path) -> None:
    ours = [0.70, 0.72, 0.74]
    for seed, acc in enumerate(ours):
        write_cell(tmp_path, label="softmax", attention="softmax", task="rt", seed=seed, metrics={"accuracy": acc})
    _plan(
        tmp_path,
        published=[
            {"source": "Table 3", "task": "rt", "note": "", "values": {"softmax": {"accuracy": 0.50}}},
            {"source": "Table 9", "task": "rt", "note": "", "seeds": 3, "values": {"softmax": {"accuracy": 0.73}}},
        ],
    )
    data = published_table(load_runs([tmp_path])).data
    assert data["ours_mean"].tolist() == pytest.approx([0.72, 0.72])
    assert data["difference"].tolist() == pytest.approx([0.22, -0.01])
    sd = np.std(ours, ddof=1)
    for row, seeds in zip(data.itertuples(), (1, 3)):  # theirs: a mean over `seeds` runs with our seeds' spread
        se = sd * np.sqrt(1 / 3 + 1 / seeds)
        assert row.p_adjusted == pytest.approx(2 * scipy_stats.t.sf(abs(row.difference) / se, 2))  # one per family
        half = scipy_stats.t.isf(0.025, 2) * se
        assert row.difference_high == pytest.approx(min(row.difference + half, 1 - row.theirs))
    assert data["verdict"].tolist() == ["ahead", "undecided"]  # 0.22 above theirs; 0.01 below, within the noise


def test_published_value_without_our_run_keeps_its_label(tmp_path: Path) -> None:
    write_cell(tmp_path, label="softmax", attention="softmax", task="rt", seed=0, metrics={"accuracy": 0.7})
    _plan(
        tmp_path,
        published=[
            {
                "source": "Table 3",
                "task": "rt",
                "note": "",
                "values": {"softmax": {"accuracy": 0.68}, "performer": {"accuracy": 0.66}},
            }
        ],
    )
    data = published_table(load_runs([tmp_path])).data.set_index("label")
    assert list(data.index) == ["softmax", "performer"]  # not "performer [run]": no run holds it yet
    assert data.loc["performer", "seeds"] == 0 and math.isnan(data.loc["performer", "ours_mean"])


def test_best_trial_picks_the_validation_best_among_complete_trials() -> None:
    assert best_trial({0: [0.70, 0.72], 1: [0.75, 0.73], 2: [0.74, 0.74]}, "max", 2) == 1
    assert best_trial({0: [0.70, 0.72], 1: [0.75, 0.73], 2: [0.74, 0.74]}, "min", 2) == 0
    assert best_trial({0: [0.70, 0.72], 1: [0.90]}, "max", 2) == 0  # trial 1 lost a seed: it does not compete
    assert best_trial({0: [0.7], 1: [0.7]}, "max", 1) == 0  # ties: the earlier trial


def test_sweep_keeps_each_labels_validation_best_trial(tmp_path: Path) -> None:
    # label a: trial 1 is best on validation, trial 0 best on test; label b (lower nll better): trial 0
    scores = {("a", 0): (0.60, 0.90), ("a", 1): (0.80, 0.70), ("b", 0): (0.40, 0.50), ("b", 1): (0.55, 0.60)}
    for (label, trial), (val, test) in scores.items():
        for seed in (0, 1):
            metric = "accuracy" if label == "a" else "nll"
            write_cell(
                tmp_path,
                label=label,
                attention="softmax",
                task="rt",
                seed=seed,
                metrics={"accuracy": test},
                details={"validation": {metric: val + 0.01 * seed}},
                sweep={"trial": trial, "values": {"lr": [1e-3, 3e-3][trial]}, "metric": metric},
            )
    results = load_runs([tmp_path])
    kept = results.cells.set_index("label")["trial"]
    assert set(kept["a"]) == {1} and set(kept["b"]) == {0} and len(results.cells) == 4
    table = task_table(results, "rt")
    assert dict(zip(table.data["label"], table.data["accuracy_mean"])) == pytest.approx({"a": 0.70, "b": 0.50})
    sweep = sweep_table(results.sweep)
    assert dict(zip(sweep.data["label"], sweep.data["chosen_lr"])) == {"a": 3e-3, "b": 1e-3}
    assert "Equal budget: every label had 2 trials." in sweep.notes


def test_sweep_runner_up_is_among_the_trials_that_competed(tmp_path: Path) -> None:
    # trial 0 has both seeds (0.70); trial 1 only one, and a higher score (0.90): it neither wins nor is runner-up
    for trial, seeds, val in ((0, (0, 1), 0.70), (1, (0,), 0.90), (2, (0, 1), 0.60)):
        for seed in seeds:
            write_cell(
                tmp_path,
                label="a",
                attention="softmax",
                task="rt",
                seed=seed,
                metrics={"accuracy": 0.5},
                details={"validation": {"accuracy": val}},
                sweep={"trial": trial, "values": {"lr": 10.0**-trial}, "metric": "accuracy"},
            )
    sweep = sweep_table(load_runs([tmp_path]).sweep)
    assert sweep.data["chosen_trial"].tolist() == [0] and sweep.data["complete_trials"].tolist() == [2]
    assert sweep.text["runner-up"].tolist() == ["0.600"]


def test_references_are_marked_and_not_ranked(tmp_path: Path) -> None:
    for label, attention, acc in (
        ("softmax", "softmax", 0.70),
        ("performer", "performer", 0.65),
        ("tfidf-logreg", "reference", 0.78),
    ):
        for seed in (0, 1):
            write_cell(
                tmp_path,
                label=label,
                attention=attention,
                task="rt",
                seed=seed,
                metrics={"accuracy": acc + 0.01 * seed},
            )
    results = load_runs([tmp_path])
    table = task_table(results, "rt")
    ranks = dict(zip(table.data["label"], table.data["accuracy_rank"]))
    assert ranks["softmax"] == 1 and ranks["performer"] == 2 and math.isnan(ranks["tfidf-logreg"])
    assert "tfidf-logreg (reference)" in set(table.text["label"])
    assert not table.best.loc[table.text["label"] == "tfidf-logreg (reference)"].any(axis=None)
    board = leaderboard_table(results)
    assert "tfidf-logreg (reference)" in set(board.text["label"])
    assert math.isnan(board.data.set_index("label").at["tfidf-logreg", "mean_rank"])
