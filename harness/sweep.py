"""The sweep's run-time choice: which trial each (task label, attention label) keeps, from the validation scores
its trial cells stored at the selection seeds (`select_seeds`); the suite's other seeds then run that trial only
(attnbench.plan). Read by the executor between cells and by the report's sweep table; no model, no torch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attnbench.cell_spec import CellSpec
from attnbench.metrics import metric_direction
from attnbench.store import FINISHED


def selects_at(sweep: dict[str, Any], seed: int) -> bool:
    """Whether every trial runs at `seed` (a selection seed, or every seed without `select_seeds`)."""
    return "select_seeds" not in sweep or seed in sweep["select_seeds"]


def sweep_group(cell: CellSpec) -> tuple[str, str]:
    """The (task label, attention label) a trial is chosen for."""
    return (cell.task.label, cell.attention.label)


def best_trial(scores: dict[int, list[float]], direction: str, seeds: int) -> int | None:
    """The trial whose validation scores (one per seed) have the best mean; only trials with `seeds` scores
    compete, unless none has them all; ties go to the earlier trial; None without any score."""
    complete = {t: s for t, s in scores.items() if len(s) == seeds} or scores
    means = {t: float(np.mean(s)) for t, s in complete.items() if s}
    if not means:
        return None
    best = max(means.values()) if direction == "max" else min(means.values())
    return min(t for t, m in means.items() if m == best)


def chosen_trials(
    cells: list[CellSpec], records: dict[str, dict[str, Any] | None], extras: dict[str, Any]
) -> dict[tuple[str, str], int]:
    """Per (task label, attention label): the trial chosen on the selection seeds' validation metric, once
    every trial cell at those seeds has finished (`records`: cell id -> stored record or None)."""

    sweep = extras.get("sweep")
    if not sweep or "select_seeds" not in sweep:
        return {}
    groups: dict[tuple[str, str], dict[int, list[float]]] = {}
    waiting = set()
    for cell in cells:
        if cell.sweep is None or not selects_at(sweep, cell.seed):
            continue
        group, record = sweep_group(cell), records.get(cell.id)
        scores = groups.setdefault(group, {}).setdefault(cell.sweep.trial, [])
        if record is None or record.get("status") not in FINISHED + ("failed",):
            waiting.add(group)
            continue
        value = ((record.get("details") or {}).get("validation") or {}).get(sweep["metric"])
        if record["status"] == "ok" and isinstance(value, (int, float)) and math.isfinite(value):
            scores.append(float(value))
    direction = metric_direction(sweep["metric"]) or "max"
    chosen = {g: best_trial(s, direction, len(sweep["select_seeds"])) for g, s in groups.items() if g not in waiting}
    return {g: t for g, t in chosen.items() if t is not None}
