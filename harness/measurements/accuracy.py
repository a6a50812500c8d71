"""Accuracy and calibration of one trained model on the test split (checkpoint chosen on validation).

Details also hold the metrics on the validation split (what a `sweep:` selects on) and the
per-example predictions on the evaluated split (`attnbench.predictions`, for paired tests). Cells of
reference models (attention name "reference", `attnbench.references`) are fitted instead of trained.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

from attnbench.cell_spec import CellSpec
from attnbench.measurements import register_measurement
from attnbench.measurements.common import attention_runtime, load_cell_task, train_cell_model, train_config
from attnbench.measurements.lengths import length_metrics
from attnbench.metrics import classification_metrics, register_metric, reliability_bins
from attnbench.model import parameter_counts
from attnbench.options import option, require
from attnbench.predictions import encode_predictions
from attnbench.progress import Progress
from attnbench.references import REFERENCE, measure_reference
from attnbench.train import predict_proba


@dataclasses.dataclass
class AccuracyOptions:
    """Options of the accuracy measurement."""

    swept: ClassVar[bool] = True  # a sweep tunes it: it trains and stores details["validation"]
    n_bins: int = option(15, "equal-width bins of the ECE and the reliability diagram")
    eval_split: Literal["test", "validation"] = option("test", "split the selected checkpoint is evaluated on")
    parameter_tolerance: float | None = option(
        None,
        "LRA's parameter rule: flag a model whose parameter count is not within this fraction of the reference "
        "row's on the same task (LRA: 0.1); None = not checked",
    )
    parameter_reference: str = option(
        "softmax", "the label of the suite's row whose parameter count the rule compares with (its softmax row)"
    )

    def required_labels(self) -> dict[str, str]:
        """Options naming a label of the suite's attentions: the rule's reference row, when the rule is on."""
        return {} if self.parameter_tolerance is None else {"parameter_reference": self.parameter_reference}

    def __post_init__(self) -> None:
        require(self.n_bins >= 1, f"n_bins={self.n_bins} must be at least 1")
        require(
            self.parameter_tolerance is None or self.parameter_tolerance >= 0,
            f"parameter_tolerance={self.parameter_tolerance} must be a non-negative fraction or null",
        )


SECONDS = {"timed": True, "bounds": (0.0, None), "margin": 0.1, "margin_relative": True, "format": ".3g"}
register_metric("train_seconds", "min", "wall time of training (phase A and B)", **SECONDS)
register_metric("phase_a_seconds", "min", "wall time of phase A", **SECONDS)
for _name, _direction, _text in (
    ("params_total", None, "parameters of the model"),
    ("params_attention", None, "parameters of the attention layers"),
    ("params_ratio", None, "parameters over a softmax model of the cell's own config (earlier runs' rule)"),
):
    register_metric(
        _name, _direction, _text, bounds=(0.0, None), format=",.0f" if _name != "params_ratio" else ".3f", exact=True
    )


@register_measurement("accuracy", config=AccuracyOptions)
def measure_accuracy(
    cell: CellSpec, options: AccuracyOptions, *, device: str = "cpu", progress: Progress | None = None
) -> dict[str, Any]:
    """Train on the cell's task, evaluate the validation-selected checkpoint: metrics, reliability, history."""
    if cell.attention.name == REFERENCE:
        return measure_reference(cell, options.n_bins, options.eval_split)
    task = load_cell_task(cell)
    result = train_cell_model(cell, task, device=device, progress=progress)
    split = task[options.eval_split]
    probs = predict_proba(result.model, split, train_config(cell).eval_batch_size, device)
    params = parameter_counts(result.model)
    metrics = classification_metrics(probs, split.labels, options.n_bins)
    validation = task["validation"]
    val_probs = (
        probs
        if options.eval_split == "validation"
        else predict_proba(result.model, validation, train_config(cell).eval_batch_size, device)
    )
    metrics |= {
        "train_seconds": result.train_seconds,
        "params_total": float(params["total"]),
        "params_attention": float(params["attention"]),
    }
    if result.phase_a is not None:
        metrics["phase_a_seconds"] = float(result.phase_a["seconds"])
    batch = train_config(cell).eval_batch_size
    per_length = [
        {
            "length": n,
            **classification_metrics(predict_proba(result.model, rows, batch, device), rows.labels, options.n_bins),
        }
        for n, rows in sorted(task.eval_splits.items())
    ]
    metrics |= length_metrics({row["length"]: {"accuracy": row["accuracy"], "nll": row["nll"]} for row in per_length})
    rule = None  # judged by the report, against the reference row's count on the same task (report/lra_table)
    if options.parameter_tolerance is not None:
        rule = {"tolerance": options.parameter_tolerance, "reference": options.parameter_reference}
    details = {
        "checkpoint": result.checkpoint,
        "best_epoch": result.best_epoch,
        "history": result.history,
        "eval_split": options.eval_split,
        "eval_rows": len(split),
        "reliability": reliability_bins(probs, split.labels, options.n_bins),
        "phase_a": result.phase_a,
        "params": params,
        "attention_runtime": attention_runtime(result.model),
        "validation": classification_metrics(val_probs, validation.labels, options.n_bins),
        "predictions": encode_predictions(probs, split.labels),
        **({"parameter_rule": rule} if rule else {}),
        **({"per_length": per_length} if per_length else {}),
        **({"sizing": result.sizing} if result.sizing else {}),
    }
    return {"metrics": metrics, "details": details}
