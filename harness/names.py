"""The vocabulary of cells, shared by the suite, its keys, the references and the report: how a cell is named,
the label of a task, and the placeholder entries of cells that use no task or no attention."""

from __future__ import annotations

from typing import Any

MODEL_SET_ATTENTION_OPTIONS = ("head_dim", "num_heads", "max_length", "seed")  # filled in by the model
TASK_SET_MODEL_OPTIONS = ("vocab_size", "num_classes", "max_length", "pad_id", "num_segments")  # from the task
NO_TASK = {"name": "none", "options": {}}
NO_ATTENTION = {"name": "none", "label": "none", "options": {}}
REFERENCE = "reference"  # the attention name of reference-model cells (attnbench.references), read by the report


def cell_name(cell: dict[str, Any]) -> str:
    """Readable cell name 'task/label/s<seed>/measurement' (+ '/t<trial>' in a sweep), matched by --filter and
    `exclude`; the task part is the task's label where it has one."""
    name = f"{task_label(cell['task'])}/{cell['attention']['label']}/s{cell['seed']}/{cell['measurement']['name']}"
    return name + (f"/t{cell['sweep']['trial']}" if "sweep" in cell else "")


def task_label(task: dict[str, Any]) -> str:
    """A suite task's label: the one given, else its name (one task may appear under several labels)."""
    return task.get("label") or task["name"]
