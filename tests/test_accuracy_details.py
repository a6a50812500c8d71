"""What accuracy cells store for comparisons: per-example predictions, validation metrics, the checkpoint rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnbench.cell_spec import CellSpec
from attnbench.measurements import run_cell
from attnbench.measurements.common import load_cell_task
from attnbench.metrics import classification_metrics
from attnbench.predictions import decode_predictions


def tiny_cell(checkpoint: str = "best-validation", epochs: int = 4) -> CellSpec:
    return CellSpec.from_json(
        {
            "suite": "test",
            "task": {
                "name": "nonlinear_tokens",
                "options": {
                    "num_train": 96,
                    "num_validation": 32,
                    "num_test": 48,
                    "min_length": 4,
                    "max_length": 16,
                    "num_tokens": 16,
                },
            },
            "attention": {"name": "softmax", "label": "softmax", "options": {}},
            "seed": 0,
            "model": {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32, "dropout": 0.0},
            "training": {"epochs": epochs, "batch_size": 32, "lr": 3e-3, "checkpoint": checkpoint},
            "measurement": {"name": "accuracy", "options": {}},
        }
    )


def test_predictions_and_validation_metrics_are_stored() -> None:
    cell = tiny_cell()
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
    details = run_cell(tiny_cell(checkpoint, epochs=5))["details"]
    history = details["history"]
    expected = {
        "best-validation": int(np.argmax([h["val_accuracy"] for h in history])) + 1,
        "best-validation-nll": int(np.argmin([h["val_nll"] for h in history])) + 1,
        "last": len(history),
    }[checkpoint]
    assert details["best_epoch"] == expected
    assert details["checkpoint"] == f"{checkpoint} (epoch {expected})"
    assert details["validation"]["nll"] == pytest.approx(history[expected - 1]["val_nll"], rel=1e-5)
