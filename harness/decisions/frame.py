"""The engine's input: a long results frame, checked and grouped into families (one task, one metric).

The frame is `attnbench.load_results`' long form: one row per cell and metric with at least the columns
task, label, seed, metric, value. Optional columns the engine reads:
- `chosen` (a sweep's chosen trial) and `status` ("ok"): only chosen, ok rows are used;
- `outcomes`: per row, a 1-D array of per-example outcomes whose mean is `value` (0/1 correct, a row's loss),
  or None; where both labels of a pair have them on a seed, the test examples count as a source of variance;
- `test_rows`: per task, "fresh" (every seed draws its own test rows) or "shared" (every seed is scored on
  the same rows); a task without it is analysed as shared (`attnbench.decisions.variance`).
A missing or NaN value on a seed is reported (`LabelSeries.left_out`) and left out, never pooled.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from attnbench.decisions.outcomes import AGREEMENT
from attnbench.errors import UserError
from attnbench.results import DESIGNS

REQUIRED = ("task", "label", "seed", "metric", "value")


@dataclasses.dataclass
class LabelSeries:
    """One label's results on one task and metric: finite values by seed, the seeds left out (NaN), and the
    per-example outcomes of the seeds that stored them."""

    label: str
    values: dict[int, float]
    left_out: list[int] = dataclasses.field(default_factory=list)
    outcomes: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def seeds(self) -> list[int]:
        return sorted(self.values)

    def mean(self) -> float:
        return float(np.mean([self.values[s] for s in self.seeds])) if self.values else math.nan


@dataclasses.dataclass
class Family:
    """The labels compared on one task and metric, and how that task's test rows were drawn."""

    task: str
    metric: str
    design: str  # "fresh" or "shared"
    labels: dict[str, LabelSeries]


def check_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The usable rows of a results frame (chosen, ok), with its required columns checked."""
    if not isinstance(frame, pd.DataFrame):
        raise UserError(f"results must be a run folder or a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise UserError(
            f"the results frame lacks the columns {missing}; give attnbench.load_results' long form "
            f"(columns {', '.join(REQUIRED)}, one row per cell and metric)"
        )
    rows = frame
    if "chosen" in rows.columns:
        rows = rows[rows["chosen"].fillna(True).astype(bool)]
    if "status" in rows.columns:
        rows = rows[rows["status"].fillna("ok") == "ok"]
    return rows[rows["metric"].notna() & rows["label"].notna() & rows["seed"].notna()]


def families(frame: pd.DataFrame, metric: str, task: str | None = None) -> list[Family]:
    """The families of `metric` (every task, or `task`), each label's seeds in order."""
    rows = check_frame(frame)
    if metric not in set(rows["metric"]):
        known = ", ".join(sorted(map(str, set(rows["metric"])))) or "none"
        raise UserError(f"no results for metric {metric!r}; the results hold: {known}")
    rows = rows[rows["metric"] == metric]
    if task is not None:
        if task not in set(rows["task"]):
            raise UserError(
                f"no {metric} results on task {task!r}; tasks: {', '.join(sorted(map(str, set(rows['task']))))}"
            )
        rows = rows[rows["task"] == task]
    _refuse_duplicates(rows)
    return [_family(str(name), metric, part) for name, part in rows.groupby("task", sort=True)]


def _refuse_duplicates(rows: pd.DataFrame) -> None:
    twice = rows[rows.duplicated(["task", "label", "seed"], keep=False)]
    if len(twice):
        first = twice.iloc[0]
        extra = [c for c in ("measurement", "run", "trial") if c in rows.columns]
        raise UserError(
            f"{len(twice)} rows share a task, label and seed (e.g. {first['task']}/{first['label']}/seed "
            f"{first['seed']}); keep one value per seed"
            + (f": filter the frame by {' or '.join(extra)} first" if extra else "")
        )


def _family(task: str, metric: str, rows: pd.DataFrame) -> Family:
    design = "shared"
    if "test_rows" in rows.columns:
        declared = set(rows["test_rows"].dropna())
        if len(declared) > 1 or not declared <= set(DESIGNS):
            raise UserError(f"task {task!r}: test_rows is {sorted(declared)}; give one of {DESIGNS} per task")
        design = declared.pop() if declared else "shared"
    labels = {}
    for label, part in rows.groupby("label", sort=True):
        series = LabelSeries(str(label), {})
        for row in part.sort_values("seed").itertuples():
            seed, value = int(row.seed), float(row.value)
            if not math.isfinite(value):
                series.left_out.append(seed)
                continue
            series.values[seed] = value
            outcomes = getattr(row, "outcomes", None)
            if isinstance(outcomes, (np.ndarray, list, tuple)):
                outcomes = np.asarray(outcomes, dtype=float)
                if outcomes.ndim != 1 or outcomes.size < 2 or not np.isfinite(outcomes).all():
                    raise UserError(
                        f"task {task!r}, label {label!r}, seed {seed}: outcomes must be a 1-D array of at least 2 "
                        f"finite numbers (one per test example), got shape {outcomes.shape}"
                    )
                if abs(outcomes.mean() - value) > AGREEMENT * max(1.0, abs(value)):
                    raise UserError(
                        f"task {task!r}, label {label!r}, seed {seed}: the outcomes average {outcomes.mean():.6g}, "
                        f"the value is {value:.6g}; give the per-example outcomes of this metric on this seed"
                    )
                series.outcomes[seed] = outcomes
        labels[str(label)] = series
    return Family(task, metric, design, labels)
