"""What accuracy cells store for comparisons: per-example predictions, validation metrics, the checkpoint rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cells import TINY_TRAINING, tiny_cell

from attnbench.cell_spec import CellSpec
from attnbench.measurements import run_cell
from attnbench.measurements.common import load_cell_task
from attnbench.metrics import classification_metrics
from attnbench.predictions import decode_predictions


def trained_cell(checkpoint: str = "best-validation", epochs: int = 4) -> CellSpec:
    return tiny_cell(training={**TINY_TRAINING, "epochs": epochs, "checkpoint": checkpoint})


def test_predictions_and_validation_metrics_are_stored() -> None:
    cell = trained_cell()
    result = run_cell(cell)
    details, metrics = result["details"], result["metrics"]
    stored = decode_predictions(details["predictions"])
    task = load_cell_task(cell)
    assert stored.labels.tolist() == task["test"].labels.tolist()
    assert np.allclose(stored.probs.sum(axis=1), 1.0, atol=2e-3)
    again = classification_metrics(stored.probs, stored.labels)
    assert again["accuracy"] == pytest.approx(metrics["accuracy"]) and again["nll"] == pytest.approx(
        metrics["nll"], abs=2e-3
    )
    assert set(details["validation"]) >= {"accuracy", "nll", "ece", "macro_f1"}
    best = details["best_epoch"]
    assert details["validation"]["accuracy"] == pytest.approx(details["history"][best - 1]["val_accuracy"])


@pytest.mark.parametrize("checkpoint", ["best-validation", "best-validation-nll", "last"])
def test_checkpoint_rule(checkpoint: str) -> None:
    torch.manual_seed(0)
    details = run_cell(trained_cell(checkpoint, epochs=5))["details"]
    history = details["history"]
    expected = {
        "best-validation": int(np.argmax([h["val_accuracy"] for h in history])) + 1,
        "best-validation-nll": int(np.argmin([h["val_nll"] for h in history])) + 1,
        "last": len(history),
    }[checkpoint]
    assert details["best_epoch"] == expected
    assert details["checkpoint"] == f"{checkpoint} (epoch {expected})"
    assert details["validation"]["nll"] == pytest.approx(history[expected - 1]["val_nll"], rel=1e-5)
