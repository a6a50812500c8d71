"""The one way tests build a cell: `tiny_cell` (a CellSpec through from_json, as the store reads it back), with the
tiny task and model most measurement tests share, each part replaceable."""

from __future__ import annotations

from typing import Any

from attnbench.cell_spec import CellSpec

TINY_TASK = {
    "name": "nonlinear_tokens",
    "options": {
        "num_train": 96,
        "num_validation": 32,
        "num_test": 48,
        "min_length": 4,
        "max_length": 16,
        "num_tokens": 16,
    },
}
TINY_MODEL = {"d_model": 16, "num_layers": 1, "num_heads": 2, "ffn_dim": 32, "dropout": 0.0}
TINY_TRAINING = {"epochs": 2, "batch_size": 32, "lr": 3e-3}
NO_TASK = {"name": "none", "options": {}}  # for measurements that read no task (fidelity, efficiency, kernel)


def tiny_cell(
    measurement: str = "accuracy",
    attention: str = "softmax",
    attention_options: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    seed: int = 0,
    *,
    task: dict[str, Any] = TINY_TASK,
    model: dict[str, Any] = TINY_MODEL,
    training: dict[str, Any] = TINY_TRAINING,
    label: str | None = None,
    attention_spec: dict[str, Any] | None = None,
) -> CellSpec:
    """A cell of `measurement` (with `options`) for `attention` (label: its name) on the tiny task and model;
    `attention_spec` a whole attention entry instead (e.g. a reference's)."""
    return CellSpec.from_json(
        {
            "suite": "test",
            "task": task,
            "attention": attention_spec
            or {"name": attention, "label": label or attention, "options": attention_options or {}},
            "seed": seed,
            "model": model,
            "training": training,
            "measurement": {"name": measurement, "options": options or {}},
        }
    )
