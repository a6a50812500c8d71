"""Tested rank groups and the at-chance mark, on hand-made cells with stored per-example predictions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_fixture import write_cell
from scipy import stats as scipy_stats

from attnbench.cli import main
from attnbench.predictions import encode_predictions
from attnbench.report import write_leaderboard, write_report
from attnbench.report.load import load_runs
from attnbench.report.paired import PredictionCache
from attnbench.report.ranking import chance_p_value, task_standings
from attnbench.report.tables import headline_summary, leaderboard_table, task_table

N = 300


def _cell(run: Path, label: str, seed: int, labels: np.ndarray, predicted: np.ndarray, task: str = "t1") -> None:
    probs = np.full((len(labels), 2), 0.2)
    probs[np.arange(len(labels)), predicted] = 0.8
    write_cell(
        run,
        label=label,
        attention="performer",
        task=task,
        seed=seed,
        metrics={"accuracy": float(np.mean(predicted == labels)), "ece": 0.01 if label == "majority-ish" else 0.1},
        details={"predictions": encode_predictions(probs, labels)},
    )


def _predict(rng: np.random.Generator, labels: np.ndarray, accuracy: float) -> np.ndarray:
    right = rng.random(len(labels)) < accuracy
    return np.where(right, labels, 1 - labels)


@pytest.fixture
def ranked_run(tmp_path: Path) -> Path:
    """'strong' and its identical twin 'strong-copy' (~0.85), 'weak' (~0.70), 'majority-ish' (always class 0)."""
    rng = np.random.default_rng(0)
    labels = (rng.random(N) < 0.6).astype(int)  # 60% class 1: the majority share is 0.6
    for seed in (0, 1, 2):
        strong = _predict(rng, labels, 0.85)
        _cell(tmp_path, "strong", seed, labels, strong)
        _cell(tmp_path, "strong-copy", seed, labels, strong.copy())
        _cell(tmp_path, "weak", seed, labels, _predict(rng, labels, 0.70))
        flip = rng.random(N) < 0.05
        _cell(tmp_path, "majority-ish", seed, labels, np.where(flip, 0, 1))  # ~ the majority class, best ECE
    return tmp_path


def test_identical_models_under_two_labels_share_rank_one(ranked_run: Path) -> None:
    table = task_table(load_runs([ranked_run]), "t1")
    data = table.data.set_index("label")
    assert data.at["strong", "accuracy_rank"] == 1 and data.at["strong-copy", "accuracy_rank"] == 1
    assert data.at["strong", "rank"] == "1–2" and data.at["strong-copy", "rank"] == "1–2"
    assert data.at["weak", "rank"] == "3"  # detectably below the top group (seeds and McNemar agree)
    best = table.best.set_index(table.text["label"])
    assert best.loc[["strong", "strong-copy"], "accuracy"].all() and not best.loc["weak", "accuracy"]
    assert not best["ece"].any()  # bold marks the accuracy group only, never a point estimate


def test_a_model_at_chance_is_marked_and_unranked(ranked_run: Path) -> None:
    results = load_runs([ranked_run])
    table = task_table(results, "t1")
    data = table.data.set_index("label")
    assert bool(data.at["majority-ish", "at_chance"]) and data.at["majority-ish", "rank"] == "at chance"
    assert np.isnan(data.at["majority-ish", "accuracy_rank"])
    text = table.text.set_index(table.data["label"])
    assert text.at["majority-ish", "label"] == "majority-ish (at chance)"
    assert "at chance" in text.at["majority-ish", "accuracy"] and text.at["majority-ish", "ece"] != "—"
    board = leaderboard_table(results)
    assert "majority-ish on t1" in " ".join(board.notes)
    summary = " ".join(headline_summary(board))
    assert "at chance" in summary and "majority-ish" in summary and "strong, strong-copy" in summary


def test_chance_p_value_is_the_binomial_test_against_the_majority_share(ranked_run: Path) -> None:
    results = load_runs([ranked_run])
    cells = results.of("accuracy")
    weak = {int(c["seed"]): c for _, c in cells[cells["label"] == "weak"].iterrows()}
    cache = PredictionCache()
    p_seeds = []
    for cell in weak.values():
        pred = cache.get(cell)
        majority = max(np.mean(pred.labels == 0), np.mean(pred.labels == 1))
        p_seeds.append(scipy_stats.binomtest(int(pred.correct.sum()), N, majority, alternative="greater").pvalue)
    assert chance_p_value(weak, cache) == pytest.approx(min(1.0, 2 * np.mean(p_seeds)))


def test_one_seed_supports_no_ranking(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, size=N)
    _cell(tmp_path, "a", 0, labels, _predict(rng, labels, 0.9))
    _cell(tmp_path, "b", 0, labels, _predict(rng, labels, 0.8))
    results = load_runs([tmp_path])
    standings = task_standings(results.of("accuracy"), ["a", "b"], PredictionCache())
    assert all(s.low is None and s.why_unranked == "one seed: no rank" for s in standings.values())
    board = leaderboard_table(results)
    assert not board.best.to_numpy().any()
    assert "No ranking is supported on t1" in " ".join(board.notes)
    assert "no ranking is supported" in " ".join(headline_summary(board))


def test_merged_runs_compare_only_labels_that_share_seeds(tmp_path: Path) -> None:
    """A label measured on other seeds is not ranked against the best; each label says how many tasks it has."""
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 2, size=N)
    for seed in (0, 1):
        _cell(tmp_path / "one", "a", seed, labels, _predict(rng, labels, 0.9))
        _cell(tmp_path / "one", "a", seed, labels, _predict(rng, labels, 0.9), task="t2")
    for seed in (5, 6):
        _cell(tmp_path / "two", "b", seed, labels, _predict(rng, labels, 0.95))
    for seed in (0, 1):
        _cell(tmp_path / "two", "c", seed, labels, _predict(rng, labels, 0.6))
    out = write_leaderboard([tmp_path / "one", tmp_path / "two"], tmp_path / "board")
    board = pd.read_csv(out / "tables" / "leaderboard.csv").set_index("label")
    assert board.at["b", "t1:rank"].startswith("seeds [5, 6] lack the task's [0, 1]")  # other seeds: not ranked
    assert board.at["a", "tasks"] == 2 and board.at["c", "tasks"] == 1
    assert board.at["a", "t1:rank"] == "1" and board.at["c", "t1:rank"] == "2"


def test_report_page_states_the_summary(ranked_run: Path) -> None:
    page = (write_report(ranked_run) / "index.html").read_text()
    assert "at chance (accuracy not above the majority class): majority-ish" in page


def test_leaderboard_command_prints_the_summary(
    ranked_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    planned = sorted(p.stem for p in (ranked_run / "cells").glob("*.json"))
    (ranked_run / "run.json").write_text(json.dumps({"schema": 1, "suite": "t", "cell_ids": planned}))
    assert main(["leaderboard", str(ranked_run), "--out", str(tmp_path / "board")]) == 0
    printed = capsys.readouterr().out
    assert "Summary:" in printed and "- t1: at chance (accuracy not above the majority class): majority-ish." in printed
