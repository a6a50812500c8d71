"""Robustness: test-time corruption sweep of one trained model, plus optional label-noise and feature-budget retraining.

Summary number (`robustness_auc`): for each corruption kind, the area under accuracy against
severity (trapezoid over the severities, the clean accuracy standing at severity 0), divided by
the area of a model that keeps its clean accuracy at every severity, i.e. max severity x clean
accuracy; 1 = no loss, 0.5 = accuracy falling linearly to zero. The metric is the mean over kinds;
`robustness_auc_<kind>` gives each kind, `label_noise_auc` the same summary over noise rates.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np
from torch import nn

from attnbench.cell_spec import CellSpec
from attnbench.measurements import register_measurement
from attnbench.measurements.common import has_option, load_cell_task, train_cell_model, train_config
from attnbench.metrics import accuracy, expected_calibration_error, register_metric
from attnbench.options import option, require
from attnbench.progress import Progress
from attnbench.tasks.base import Split, TaskData
from attnbench.tasks.corruption import corrupt
from attnbench.train import predict_proba

Corruption = Literal["substitute", "delete", "swap", "insert", "mixed"]


@dataclasses.dataclass
class RobustnessOptions:
    """Options of the robustness measurement (defaults cheap; suites scale them)."""

    corruptions: list[Corruption] = option(["substitute", "delete", "swap", "insert"], "test-time corruption kinds")
    severities: list[float] = option([0.0, 0.05, 0.1, 0.2, 0.4], "fractions of tokens corrupted")
    label_noise: list[float] = option([], "train-label noise rates; one extra model is trained per rate > 0")
    feature_budgets: list[int] = option([], "num_features values to retrain at (attentions with that option)")
    n_bins: int = option(15, "equal-width bins of the ECE")

    def __post_init__(self) -> None:
        for s in self.severities:
            require(0.0 <= s <= 1.0, f"severity {s} must lie in [0, 1]")
        for r in self.label_noise:
            require(0.0 <= r <= 1.0, f"label_noise rate {r} must lie in [0, 1]")
        for m in self.feature_budgets:
            require(m >= 1, f"feature budget {m} must be at least 1")
        require(self.n_bins >= 1, f"n_bins={self.n_bins} must be at least 1")


def normalized_auc(severities: list[float], accuracies: list[float], clean_accuracy: float) -> float | None:
    """Trapezoid area of accuracy over severity / (max severity x clean accuracy); None when undefined."""
    points = sorted(zip(severities, accuracies))
    if points[0][0] > 0:
        points.insert(0, (0.0, clean_accuracy))
    s, a = np.array(points).T
    if s[-1] <= 0 or clean_accuracy <= 0:
        return None
    return float(np.sum(np.diff(s) * (a[1:] + a[:-1]) / 2.0) / (s[-1] * clean_accuracy))


def _evaluate(model: nn.Module, split: Split, batch_size: int, n_bins: int, device: str) -> dict[str, float]:
    probs = predict_proba(model, split, batch_size, device)
    return {"accuracy": accuracy(probs, split.labels), "ece": expected_calibration_error(probs, split.labels, n_bins)}


for _pattern, _direction, _text in (
    ("clean_accuracy", "max", "test accuracy without corruption"),
    ("clean_ece", "min", "test ECE without corruption"),
    ("robustness_auc*", "max", "normalised area under accuracy vs corruption severity"),
    ("label_noise_accuracy@*", "max", "test accuracy after training with this label-noise rate"),
    ("label_noise_auc", "max", "normalised area under accuracy vs label-noise rate"),
    ("feature_budget_accuracy@*", "max", "test accuracy retrained with this many features"),
):
    register_metric(_pattern, _direction, _text, bounds=(0.0, 1.0), margin=0.01)


@register_measurement("robustness", config=RobustnessOptions)
def measure_robustness(
    cell: CellSpec, options: RobustnessOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Accuracy and ECE per (corruption, severity), per label-noise rate and per feature budget."""
    task = load_cell_task(cell)
    batch_size = train_config(cell).eval_batch_size
    model = train_cell_model(cell, task, device=device, progress=progress).model
    test = task["test"]
    clean = _evaluate(model, test, batch_size, options.n_bins, device)
    metrics = {"clean_accuracy": clean["accuracy"], "clean_ece": clean["ece"]}
    rows: list[dict[str, Any]] = []
    aucs = []
    for kind in options.corruptions:
        accs = []
        for severity in options.severities:
            split = (
                test
                if severity == 0
                else corrupt(
                    test,
                    kind=kind,
                    severity=severity,
                    vocab_size=task.vocab_size,
                    seed=cell.seed,
                    special_ids=task.special_ids,
                    pad_id=task.pad_id,
                )
            )
            result = clean if severity == 0 else _evaluate(model, split, batch_size, options.n_bins, device)
            rows.append({"kind": "corruption", "corruption": kind, "severity": severity, "status": "ok", **result})
            accs.append(result["accuracy"])
        auc = normalized_auc(options.severities, accs, clean["accuracy"])
        if auc is not None:
            metrics[f"robustness_auc_{kind}"] = auc
            aucs.append(auc)
    if aucs:
        metrics["robustness_auc"] = float(np.mean(aucs))
    rows += _label_noise_rows(cell, options, clean, metrics, batch_size, device, progress)
    rows += _feature_budget_rows(cell, task, options, metrics, batch_size, device, progress)
    return {"metrics": metrics, "details": {"rows": rows, "test_rows": len(test), "severities": options.severities}}


def _label_noise_rows(
    cell: CellSpec,
    options: RobustnessOptions,
    clean: dict[str, float],
    metrics: dict[str, float],
    batch_size: int,
    device: str,
    progress: Progress | None,
) -> list[dict[str, Any]]:
    """One model per noise rate (train labels flipped by the task's label_noise option), on the clean test split."""
    rows, rates, accs = [], [], []
    for rate in options.label_noise:
        if rate == 0:
            result = clean
        else:
            noisy = load_cell_task(cell, label_noise=rate)
            model = train_cell_model(cell, noisy, device=device, progress=progress).model
            result = _evaluate(model, noisy["test"], batch_size, options.n_bins, device)
        rows.append({"kind": "label_noise", "severity": rate, "status": "ok", **result})
        metrics[f"label_noise_accuracy@{rate:g}"] = result["accuracy"]
        rates.append(rate)
        accs.append(result["accuracy"])
    auc = normalized_auc(rates, accs, clean["accuracy"]) if rates else None
    if auc is not None:
        metrics["label_noise_auc"] = auc
    return rows


def _feature_budget_rows(
    cell: CellSpec,
    task: TaskData,
    options: RobustnessOptions,
    metrics: dict[str, float],
    batch_size: int,
    device: str,
    progress: Progress | None,
) -> list[dict[str, Any]]:
    """Retrain at each num_features (same task, seed and settings); skipped rows for attentions without it."""
    name = cell.attention.name
    base_options = cell.attention.options
    rows = []
    for budget in options.feature_budgets:
        row = {"kind": "feature_budget", "num_features": budget, "severity": None}
        if not has_option(name, "num_features"):
            rows.append(
                row
                | {
                    "status": "skipped",
                    "accuracy": None,
                    "ece": None,
                    "reason": f"attention {name!r} has no num_features option",
                }
            )
            continue
        model = train_cell_model(
            cell, task, device=device, progress=progress, attention_options={**base_options, "num_features": budget}
        ).model
        result = _evaluate(model, task["test"], batch_size, options.n_bins, device)
        rows.append(row | {"status": "ok", **result})
        metrics[f"feature_budget_accuracy@{budget}"] = result["accuracy"]
    return rows
