"""The LRA table: per-task means, and the inference engine's verdict on every pair (hand-built predictions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from report_fixture import write_cell

from attnbench.predictions import encode_predictions
from attnbench.report.load import load_runs
from attnbench.report.lra_table import lra_tables

ROWS = 1000


def _cell(run: Path, label: str, task: str, seed: int, correct: np.ndarray, params: float = 1000.0, **rule) -> None:
    labels = torch.tensor(np.arange(ROWS) % 2)
    predicted = torch.where(torch.tensor(correct), labels, 1 - labels)
    probs = torch.nn.functional.one_hot(predicted, 2).float() * 0.8 + 0.1
    write_cell(
        run,
        label=label,
        attention=label,
        task=task,
        seed=seed,
        metrics={"accuracy": float(correct.mean()), "params_total": params},
        details={"predictions": encode_predictions(probs, labels), "parameter_rule": {"tolerance": 0.1, **rule}},
    )


def test_verdict_counts_and_flags(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for seed in range(3):
        shared = rng.random(ROWS) < 0.7
        good = shared | (rng.random(ROWS) < 0.8)  # about 94% correct
        for label in ("softmax", "performer", "linformer"):
            # listops: softmax far ahead of two identical models; pathfinder: all three identical
            _cell(tmp_path, label, "listops", seed, good if label == "softmax" else shared)
            _cell(tmp_path, label, "pathfinder", seed, shared, params=1300.0 if label == "linformer" else 1000.0)
    lra, pairs = lra_tables(load_runs([tmp_path]))
    counts = lra.text.set_index("attention").loc["pairs: ahead / behind / equivalent / undecided"]
    assert counts["listops"] == "0 / 2 / 0 / 1" and counts["pathfinder"] == "0 / 0 / 0 / 3"
    behind = pairs.data[pairs.data["verdict"] == "behind"]
    assert sorted(zip(behind["label_a"], behind["label_b"])) == [("linformer", "softmax"), ("performer", "softmax")]
    assert set(pairs.data.loc[pairs.data["task"] == "pathfinder", "verdict"]) == {"undecided"}  # identical: no test
    softmax = lra.data.set_index("label").loc["softmax"]
    assert abs(softmax["average"] - (softmax["listops:mean"] + softmax["pathfinder:mean"]) / 2) < 1e-12
    assert lra.text.set_index("attention").loc["linformer", "pathfinder"].endswith("⚑")
    assert list(lra.text.columns) == ["attention", "listops", "pathfinder", "average"]
    # bold: listops's top group is softmax alone; on pathfinder all three tie, so nobody is singled out
    bold = lra.best.assign(attention=lra.text["attention"]).set_index("attention")
    assert bold["listops"].to_dict() == {
        "linformer": False,
        "performer": False,
        "softmax": True,
        "pairs: ahead / behind / equivalent / undecided": False,
    }
    assert not bold["pathfinder"].any() and not bold["average"].any()
    data = lra.data.set_index("label")
    assert (
        data.at["softmax", "listops:rank"] == 1
        and data.at["performer", "listops:rank"] == 2 == data.at["linformer", "listops:rank"]
    )
    assert (data.at["performer", "listops:rank_low"], data.at["performer", "listops:rank_high"]) == (2, 3)


def test_bold_is_the_best_set_not_the_highest_mean(tmp_path: Path) -> None:
    """Two labels whose accuracies differ by two examples in 1,000 per seed: the higher mean is not bolded alone, and
    the pair is equivalent (its gap, 0.002, lies well within the 0.01 margin)."""
    rng = np.random.default_rng(1)
    for seed in range(3):
        base = rng.random(ROWS) < 0.7
        better = base.copy()
        better[np.flatnonzero(~base)[:2]] = True  # two more rows right: not a detectable gap
        _cell(tmp_path, "softmax", "listops", seed, better)
        _cell(tmp_path, "performer", "listops", seed, base)
    lra, pairs = lra_tables(load_runs([tmp_path]))
    assert (
        lra.data.set_index("label").loc["softmax", "listops:mean"]
        > lra.data.set_index("label").loc["performer", "listops:mean"]
    )
    assert not lra.best["listops"].any() and set(pairs.data["verdict"]) == {"equivalent"}


def test_no_lra_tasks_no_table(tmp_path: Path) -> None:
    write_cell(tmp_path, label="softmax", task="sst2", metrics={"accuracy": 0.8})
    assert lra_tables(load_runs([tmp_path])) == []


def test_the_parameter_rule_compares_with_the_suites_reference_row_on_the_task(tmp_path: Path) -> None:
    """A label whose own `model:` override gives it 11.3x the softmax row's parameters breaks the rule (a cell
    cannot know its overrides; the rows can); another reference label is taken where the cells name one."""
    correct = np.random.default_rng(2).random(ROWS) < 0.7
    for seed in range(2):
        _cell(tmp_path, "softmax", "listops", seed, correct, params=1000.0)
        _cell(tmp_path, "wide", "listops", seed, correct, params=11300.0)
        _cell(tmp_path, "narrow", "listops", seed, correct, params=1050.0)
    lra = lra_tables(load_runs([tmp_path]))[0]
    rows = lra.data.set_index("label")
    assert rows.at["wide", "listops:breaks_parameter_rule"] and rows.at["wide", "listops:params_ratio"] == 11.3
    assert not rows.at["narrow", "listops:breaks_parameter_rule"]
    assert "wide × listops (11.30× softmax's)" in lra.notes[-1]

    other = tmp_path / "other"
    for seed in range(2):
        for label, params in (("base", 11000.0), ("wide", 11300.0), ("softmax", 1000.0)):
            _cell(other, label, "listops", seed, correct, params=params, reference="base")
    rows = lra_tables(load_runs([other]))[0].data.set_index("label")
    assert not rows.at["wide", "listops:breaks_parameter_rule"] and rows.at["softmax", "listops:breaks_parameter_rule"]
