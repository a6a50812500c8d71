"""The plan of a suite: its cells, one per (measurement, task, attention, seed), the reference attentions a text
task's accuracy cells get, and each cell's sweep trials. `Suite` is a validated suite (attnbench.suite reads and
checks the YAML); `Suite.cells(chosen)` expands it, given the sweep's run-time choice (attnbench.sweep) where
trials are chosen at some seeds and run at the others.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from pathlib import Path
from typing import Any

from attnbench.cell_spec import AttentionSpec, CellSpec, MeasurementSpec, SweepSpec, TaskSpec
from attnbench.measurements import MEASUREMENTS
from attnbench.names import NO_ATTENTION, NO_TASK, REFERENCE, task_label
from attnbench.sweep import selects_at, sweep_group
from attnbench.tasks import TASKS
from attnbench.tasks.sentence import TextTaskConfig


@dataclasses.dataclass
class Suite:
    """A validated suite: normalised entries plus the fully resolved configs (defaults filled in)."""

    name: str
    description: str
    path: Path
    attentions: list[dict[str, Any]]  # {"name", "label", "options", "model" (overrides for its cells)}
    tasks: list[dict[str, Any]]  # {"name", "options", "label"?, "model"?, "training"? (overrides for its cells)}
    seeds: list[int]
    model: dict[str, Any]
    training: dict[str, Any]
    measurements: list[dict[str, Any]]  # {"name", "options"}
    cell_timeout: float | None
    exclude: list[str]
    resolved: dict[str, Any]  # every config with its defaults, for provenance
    task_free: frozenset[str]  # measurement names that do not use a task
    seed_free: frozenset[str]  # measurement names that do not use a seed
    attention_free: frozenset[str]  # measurement names that do not use an attention
    comparison_keys: dict[str, Any] = dataclasses.field(default_factory=dict)  # attnbench.suite_keys
    task_inputs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # by task label: sha256 of
    # each local file the task reads and its generator version when above 1; part of each of its cells' identity

    def as_dict(self) -> dict[str, Any]:
        """The normalised suite (JSON-able), as stored in run.json."""
        return {
            "name": self.name,
            "description": self.description,
            "path": str(self.path),
            "attentions": self.attentions,
            "tasks": self.tasks,
            "seeds": self.seeds,
            "model": self.model,
            "training": self.training,
            "measurements": self.measurements,
            "cell_timeout": self.cell_timeout,
            "exclude": self.exclude,
            "resolved": self.resolved,
            **({"task_inputs": self.task_inputs} if self.task_inputs else {}),
            **self.comparison_keys,
        }

    def cells(self, chosen: dict[tuple[str, str], int] | None = None) -> list[CellSpec]:
        """Every cell of the suite, in a stable order (measurement, task, attention, seed); with a sweep's
        `select_seeds`, the other seeds' cells of the labels whose trial is `chosen` (suite_keys.chosen_trials)."""
        cells = []
        for measurement in self.measurements:
            tasks = [NO_TASK] if measurement["name"] in self.task_free else self.tasks
            seeds = self.seeds[:1] if measurement["name"] in self.seed_free else self.seeds
            attentions = [NO_ATTENTION] if measurement["name"] in self.attention_free else self.attentions
            for task in tasks:
                for attention in attentions + reference_entries(self.comparison_keys, measurement["name"], task):
                    for seed in seeds:
                        cell = CellSpec(
                            suite=self.name,
                            task=TaskSpec(task["name"], _copy(task["options"]), task.get("label")),
                            attention=AttentionSpec(attention["name"], attention["label"], _copy(attention["options"])),
                            seed=seed,
                            model=_copy({**self.model, **task.get("model", {}), **attention.get("model", {})}),
                            training=_copy({**self.training, **task.get("training", {})}),
                            measurement=MeasurementSpec(measurement["name"], _copy(measurement["options"])),
                            inputs=_copy(self.task_inputs.get(task_label(task))) or None,
                        )
                        cells += [
                            c
                            for c in sweep_trials(cell, self.comparison_keys, chosen)
                            if not any(fnmatch.fnmatchcase(c.name, p) for p in self.exclude)
                        ]
        return cells


def reference_entries(extras: dict[str, Any], measurement: str, task: dict[str, Any]) -> list[dict[str, Any]]:
    """The reference attentions a (measurement, task) gets: all of them on accuracy cells of text tasks."""
    if measurement != "accuracy" or not extras.get("references") or not _is_text_task(task["name"]):
        return []
    return [dict(r) for r in extras["references"]]


def _is_text_task(name: str) -> bool:

    return issubclass(TASKS.get(name).config, TextTaskConfig)


def sweep_trials(
    cell: CellSpec, extras: dict[str, Any], chosen: dict[tuple[str, str], int] | None = None
) -> list[CellSpec]:
    """The cell once per sweep trial (training and model overrides, and its `sweep`); references are not swept.
    With `select_seeds`, a cell at another seed is the (task label, attention label)'s `chosen` trial only,
    and none while that label's choice is not known."""
    sweep = extras.get("sweep")
    if not sweep or cell.attention.name == REFERENCE or not swept(cell.measurement.name):
        return [cell]
    out = []
    for i, trial in enumerate(sweep["trials"]):
        if not selects_at(sweep, cell.seed) and (chosen or {}).get(sweep_group(cell)) != i:
            continue
        out.append(
            dataclasses.replace(
                cell,
                training={**cell.training, **trial["training"]},
                model={**cell.model, **trial["model"]},
                sweep=SweepSpec(i, dict(trial["values"]), sweep["metric"]),
            )
        )
    return out


def swept(measurement: str) -> bool:
    """Whether a sweep's trials apply to a measurement's cells: its options declare `swept = True` (it trains and
    stores its validation scores in details["validation"], which choose the trial): accuracy, recall, lm."""
    return getattr(MEASUREMENTS.get(measurement).config, "swept", False) is True


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value))
