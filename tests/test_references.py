"""Reference models: they beat chance on the shared SST-2 / Rotten Tomatoes data, C is chosen on validation,
and the accuracy measurement runs them as ordinary cells."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from cells import tiny_cell
from scipy import stats as scipy_stats

from attnbench.cell_spec import CellSpec
from attnbench.measurements import SkipCell, run_cell
from attnbench.predictions import decode_predictions
from attnbench.references import reference_attention

DATA_DIR = os.environ.get("ATTNBENCH_DATA_DIR")
needs_data = pytest.mark.skipif(
    not DATA_DIR,
    reason="ATTNBENCH_DATA_DIR is unset: no local SST-2 / Rotten Tomatoes files (CI sets it to ../shared/data)",
)


def _cell(task: str, reference: str, cache_dir: str, options: dict | None = None, **task_options) -> CellSpec:
    return tiny_cell(
        task={"name": task, "options": {"max_length": 64, "cache_dir": cache_dir, **task_options}},
        attention_spec=reference_attention(reference, options),
        model={},
        training={"max_train_examples": 3000},
    )


def _jsonl_labels(task: str, split: str) -> list[int]:
    return [
        json.loads(line)["label"]
        for line in (Path(DATA_DIR) / task / f"{split}.jsonl").read_text(encoding="utf-8").split("\n")
        if line.strip()
    ]


@needs_data
@pytest.mark.parametrize("task", ["sst2", "rotten_tomatoes"])
def test_tfidf_logreg_beats_chance(task: str, cache_dir: str) -> None:
    result = run_cell(_cell(task, "tfidf-logreg", cache_dir, {"c_grid": [0.3, 3.0]}))
    metrics, details = result["metrics"], result["details"]
    n = details["eval_rows"]
    correct = round(metrics["accuracy"] * n)
    p_chance = scipy_stats.binomtest(correct, n, 0.5, alternative="greater").pvalue
    assert metrics["accuracy"] > 0.7 and p_chance < 1e-20, (metrics["accuracy"], p_chance)
    scores = details["validation_accuracy_by_c"]
    best = max(sorted(scores, key=float), key=lambda c: scores[c])  # first maximum: ties go to the smaller C
    assert details["chosen_c"] == float(best)
    stored = decode_predictions(details["predictions"])
    assert np.mean(stored.correct) == pytest.approx(metrics["accuracy"])
    assert stored.labels.tolist() == _jsonl_labels(task, "test")  # the test rows in file order


@needs_data
def test_majority_predicts_the_training_majority_with_its_frequency(cache_dir: str) -> None:
    train = _jsonl_labels("rotten_tomatoes", "train")[:3000]  # the rows the cell trains on
    test = _jsonl_labels("rotten_tomatoes", "test")
    majority, count = Counter(train).most_common(1)[0]
    result = run_cell(_cell("rotten_tomatoes", "majority", cache_dir))
    assert result["metrics"]["accuracy"] == pytest.approx(np.mean(np.array(test) == majority))
    assert result["details"]["class_prior"][majority] == pytest.approx(count / len(train))
    assert result["metrics"]["params_attention"] == 0.0


def test_a_task_without_texts_is_skipped() -> None:
    cell = tiny_cell(
        task={"name": "nonlinear_tokens", "options": {"num_train": 32, "num_validation": 16, "num_test": 16}},
        attention_spec=reference_attention("majority"),
        model={},
        training={},
    )
    with pytest.raises(SkipCell, match="text tasks only"):
        run_cell(cell)
