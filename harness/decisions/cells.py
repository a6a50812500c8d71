"""Stored cells as the engine's input: the ok cells of a results table (`attnbench.results.Results.ok`, or any
frame with its columns) as a long frame with per-example outcomes and each task's test-row design.

Design per task: what the cell's data provenance stored (`test_rows`, written by `attnbench.tasks.load_task`),
else the task's declaration (`TaskConfig.test_rows`) as its run stored it in run.json
(`attnbench.results.adopt_designs`, re-exported here) or the task registry says, else "shared". A task declared
"fresh" whose cells all ran on one data seed (the provenance's data options) is analysed as shared: its seeds
did not draw new rows. This module imports nothing of the report, which builds its frames here.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from attnbench.decisions.outcomes import cell_outcomes
from attnbench.results import DESIGNS, declared_design
from attnbench.results import adopt_designs as adopt_designs

FRAME_COLUMNS = ["run", "measurement", "task", "label", "seed", "metric", "value", "outcomes", "test_rows"]


def _stored(provenance: Any, key: str) -> Any:
    data = provenance.get("data") if isinstance(provenance, dict) else None
    return data.get(key) if isinstance(data, dict) else None


def task_design(cells: pd.DataFrame) -> str:
    """The test-row design of one task's cells (module docstring)."""
    stored = {d for d in (_stored(p, "test_rows") for p in cells["provenance"]) if d in DESIGNS}
    if len(stored) == 1:
        design = stored.pop()
    else:
        names = {_stored(p, "task") for p in cells["provenance"]} - {None}
        design = declared_design(names.pop()) if len(names) == 1 else "shared"
    data_seeds = {(_stored(p, "options") or {}).get("seed") for p in cells["provenance"]} - {None}
    if design == "fresh" and len(data_seeds) == 1 and cells["seed"].nunique() > 1:
        return "shared"
    return design


def cells_frame(cells: pd.DataFrame, metric: str | None = None) -> pd.DataFrame:
    """Ok cells (columns run, measurement, task, label, seed, metrics, details, provenance; a sweep's chosen trials
    only) as the engine's long frame, with per-example outcomes where the cells stored them (only for `metric` when
    given: decoding costs time)."""
    rows = []
    for task, part in cells.groupby("task", sort=True):
        design = task_design(part)
        for cell in part.itertuples():
            for name, value in cell.metrics.items():
                if metric is not None and name != metric:
                    continue
                outcomes = cell_outcomes(cell.details, name, value) if math.isfinite(value) else None
                rows.append(
                    {
                        "run": cell.run,
                        "measurement": cell.measurement,
                        "task": task,
                        "label": cell.label,
                        "seed": cell.seed,
                        "metric": name,
                        "value": value,
                        "outcomes": outcomes,
                        "test_rows": design,
                    }
                )
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)
