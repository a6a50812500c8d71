"""The vocabulary of suites, shared by the suite, its keys, the references and the report: the label of a suite's
task entry, and the placeholder entries of cells that use no task or no attention (a cell's own name and
labels are attnbench.cell_spec's), and the name of a metric measured at one length ("accuracy@128")."""

from __future__ import annotations

import re
from typing import Any

MODEL_SET_ATTENTION_OPTIONS = ("head_dim", "num_heads", "max_length", "seed")  # filled in by the model
TASK_SET_MODEL_OPTIONS = ("vocab_size", "num_classes", "max_length", "pad_id", "num_segments")  # from the task
NO_TASK = {"name": "none", "options": {}}
NO_ATTENTION = {"name": "none", "label": "none", "options": {}}
REFERENCE = "reference"  # the attention name of reference-model cells (attnbench.references), read by the report
AT_LENGTH = re.compile(r"^(?P<metric>.+)@(?P<length>\d+)$")  # a metric measured at one sequence length


def task_label(task: dict[str, Any]) -> str:
    """A suite task entry's label: the one given, else its name (one task may appear under several labels)."""
    return task.get("label") or task["name"]


def split_metric_name(name: str) -> tuple[str, int] | None:
    """("accuracy", 128) from "accuracy@128"; None for a name without a length."""
    match = AT_LENGTH.match(name)
    return None if match is None else (match["metric"], int(match["length"]))
