"""The report's ranks, best sets and chance verdicts, on hand-made cells with stored per-example predictions, checked
against independent computations (scipy's and statsmodels' tests, Holm's correction)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from report_fixture import write_cell
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import DescrStatsW

from attnbench.cli import main
from attnbench.predictions import encode_predictions
from attnbench.report import write_report
from attnbench.report.inference import interval_text, rank_text
from attnbench.report.load import load_runs
from attnbench.report.tables import headline_summary, leaderboard_table, task_table

N = 20_000
TASK = "nonlinear_tokens"  # a generated task: every seed draws its own test rows (fresh), analysed over seeds


def _cell(run: Path, label: str, seed: int, labels: np.ndarray, predicted: np.ndarray) -> float:
    probs = np.full((len(labels), 2), 0.2)
    probs[np.arange(len(labels)), predicted] = 0.8
    accuracy = float(np.mean(predicted == labels))
    write_cell(run, label=label, attention="performer", task=TASK, seed=seed,
               metrics={"accuracy": accuracy, "ece": 0.01 if label == "majority-ish" else 0.1},
               details={"predictions": encode_predictions(probs, labels)},
               data={"task": TASK, "test_rows": "fresh"})  # fmt: skip
    return accuracy


def _predict(rng: np.random.Generator, labels: np.ndarray, accuracy: float) -> np.ndarray:
    right = rng.random(len(labels)) < accuracy
    return np.where(right, labels, 1 - labels)


@pytest.fixture
def ranked_run(tmp_path: Path) -> tuple[Path, dict[str, list[float]], list[float]]:
    """'strong' and its identical twin 'strong-copy' (~0.85), 'weak' (~0.70), 'majority-ish' (the majority class,
    ~0.60), five seeds each drawing 20,000 fresh test rows; returns the run, each label's accuracies and each
    seed's majority share."""
    rng = np.random.default_rng(0)
    values: dict[str, list[float]] = {"strong": [], "strong-copy": [], "weak": [], "majority-ish": []}
    shares = []
    for seed in range(5):
        labels = (rng.random(N) < 0.6).astype(int)
        shares.append(max(labels.mean(), 1 - labels.mean()))
        strong = _predict(rng, labels, 0.85)
        values["strong"].append(_cell(tmp_path, "strong", seed, labels, strong))
        values["strong-copy"].append(_cell(tmp_path, "strong-copy", seed, labels, strong.copy()))
        values["weak"].append(_cell(tmp_path, "weak", seed, labels, _predict(rng, labels, 0.70)))
        values["majority-ish"].append(_cell(tmp_path, "majority-ish", seed, labels, np.ones(N, dtype=int)))
    return tmp_path, values, shares


def test_ties_share_rank_one_and_a_detectably_worse_label_leaves_the_best_set(ranked_run) -> None:
    run, values, _ = ranked_run
    table = task_table(load_runs([run]), TASK)
    data = table.data.set_index("label")
    assert data.at["strong", "accuracy_rank"] == 1 and data.at["strong-copy", "accuracy_rank"] == 1
    assert data.at["weak", "accuracy_rank"] == 3 and data.at["majority-ish", "accuracy_rank"] == 4
    assert set(data.index[data["accuracy_best_set"].astype(bool)]) == {"strong", "strong-copy"}
    best = table.best.set_index(table.text["label"])
    assert best.loc[["strong", "strong-copy"], "accuracy"].all() and not best.loc["weak", "accuracy"]
    for label, mine in values.items():  # fresh rows: the interval is the seeds' t-interval (scipy via statsmodels)
        low, high = DescrStatsW(mine).tconfint_mean(0.05)
        assert data.at[label, "accuracy_low"] == pytest.approx(max(low, 0.0))
        assert data.at[label, "accuracy_high"] == pytest.approx(min(high, 1.0))


def test_chance_verdicts_are_equivalence_and_difference_tests_against_the_majority_share(ranked_run) -> None:
    run, values, shares = ranked_run
    results = load_runs([run])
    data = task_table(results, TASK).data.set_index("label")
    chance, margin = float(np.mean(shares)), 0.01
    labels = sorted(values)
    # independently: the one-sample t-test (above / below) and TOST (within the margin) per label, Holm over labels
    p = [DescrStatsW(values[lab]).ttest_mean(chance)[1] for lab in labels]
    q = [min(1.0, 2 * DescrStatsW(values[lab]).ttost_mean(chance - margin, chance + margin)[0]) for lab in labels]
    detected, equivalent = multipletests(p, method="holm")[0], multipletests(q, method="holm")[0]
    for lab, d, e in zip(labels, detected, equivalent):
        above = np.mean(values[lab]) > chance
        word = "at chance" if e else ("above chance" if above else "below chance") if d else "undetermined"
        assert data.at[lab, "chance"] == word, lab
    assert data.at["majority-ish", "chance"] == "at chance" and data.at["strong", "chance"] == "above chance"
    board = leaderboard_table(results)
    summary = " ".join(headline_summary(board))
    assert "at chance" in summary and "majority-ish" in summary and "strong, strong-copy" in summary
    assert "±0.010" in " ".join(board.notes)


def test_one_seed_supports_no_ranking_claim(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, size=N)
    _cell(tmp_path, "a", 0, labels, _predict(rng, labels, 0.9))
    _cell(tmp_path, "b", 0, labels, _predict(rng, labels, 0.8))
    board = leaderboard_table(load_runs([tmp_path]))
    data = board.data.set_index("label")
    assert (data.at["a", f"{TASK}:rank"], data.at["b", f"{TASK}:rank"]) == (1, 2)  # by mean ...
    assert data[f"{TASK}:best_set"].all() and not board.best.to_numpy().any()  # ... but nothing is detectable
    assert "no label is detectably better than another" in " ".join(headline_summary(board))


def test_rank_and_interval_texts() -> None:
    assert rank_text({"rank": 3.0, "rank_low": 1.0, "rank_high": 12.0}) == "3, 1–12"
    assert rank_text({"rank": 1.0, "rank_low": 1.0, "rank_high": 1.0}) == "1"
    assert interval_text(0.5, 0.4, 0.6, (0.45, 0.55)) == "0.500 [0.400, 0.600] (seeds 0.450 0.550)"
    assert interval_text(0.5, 0.4, 0.6, tuple(np.full(5, 0.5))) == "0.500 [0.400, 0.600]"  # 5 seeds: no values
    assert interval_text(0.5, 0.4, 0.6, (0.45, 0.55), scale=100, decimals=1) == "50.0 [40.0, 60.0] (seeds 45.0 55.0)"


def test_report_page_and_leaderboard_command_state_the_summary(ranked_run, tmp_path, capsys) -> None:
    run, _, _ = ranked_run
    page = (write_report(run) / "index.html").read_text()
    assert "at chance (accuracy equivalent to the majority class&#x27;s share): majority-ish" in page or (
        "at chance (accuracy equivalent to the majority class's share): majority-ish" in page
    )
    planned = sorted(p.stem for p in (run / "cells").glob("*.json"))
    (run / "run.json").write_text(json.dumps({"schema": 1, "suite": "t", "cell_ids": planned}))
    assert main(["leaderboard", str(run), "--out", str(tmp_path / "board")]) == 0
    printed = capsys.readouterr().out
    assert "Summary:" in printed and f"- {TASK}: at chance" in printed and "majority-ish" in printed
