"""The sweep's run-time choice: which trial each (task label, attention label) keeps, from the validation scores
its trial cells stored at the selection seeds (`select_seeds`); the suite's other seeds then run that trial only
(attnbench.plan). Read by the executor between cells, and when stored results are read (`select_trials`: the same
choice on the stored cells, which keeps only each label's chosen trial; the report's sweep table lists them all);
no model, no torch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

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


def _trial_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per sweep cell: keys, trial, its values, metric and validation score (NaN if not ok)."""
    rows = []
    for idx, c in cells[cells["trial"].notna()].iterrows():
        sweep = c["sweep"] or {}
        metric = sweep.get("metric", "accuracy")
        validation = (c["details"] or {}).get("validation") or {} if c["status"] == "ok" else {}
        value = validation.get(metric)
        rows.append(
            {
                "index": idx,
                "run": c["run"],
                "measurement": c["measurement"],
                "task": c["task"],
                "label": c["label"],
                "seed": c["seed"],
                "trial": int(c["trial"]),
                "metric": metric,
                "values": sweep.get("values") or {},
                "score": float(value) if isinstance(value, (int, float)) else math.nan,
            }
        )
    return pd.DataFrame(rows)


def select_trials(
    cells: pd.DataFrame, select_seeds: dict[str, list[int] | None] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Stored cells (`attnbench.results`) with only each label's chosen trial left, and one row per trial (None
    without a sweep): its values, its finite validation scores at the seeds the choice reads, whether it competed
    (had them all) and was chosen; `select_seeds`: per run tag, the seeds the choice reads (None: every seed)."""
    trials = _trial_frame(cells)
    if trials.empty:
        return cells, None
    drop, summary = [], []
    for (run, _measurement, task, label), part in trials.groupby(["run", "measurement", "task", "label"], sort=True):
        metric = part["metric"].iloc[0]
        direction = metric_direction(metric) or "max"
        drawn = (select_seeds or {}).get(run)
        everything, part = part, part if drawn is None else part[part["seed"].isin(drawn)]
        seeds = len(drawn) if drawn is not None else int(part["seed"].nunique())
        scores = {int(t): [s for s in g["score"] if math.isfinite(s)] for t, g in part.groupby("trial")}
        chosen = best_trial(scores, direction, seeds)
        complete = any(len(s) == seeds for s in scores.values())
        drop += list(everything.loc[everything["trial"] != chosen, "index"])
        for t, g in part.groupby("trial"):
            found = scores[int(t)]
            summary.append(
                {
                    "run": run,
                    "task": task,
                    "label": label,
                    "trial": int(t),
                    "metric": metric,
                    "direction": direction,
                    "values": g["values"].iloc[0],
                    "scores": tuple(found),
                    "seeds_ok": len(found),
                    "seeds": seeds,
                    "competed": len(found) == seeds or not complete,
                    "chosen": int(t) == chosen,
                    "select_seeds": drawn,
                }
            )
    return cells.drop(index=drop).reset_index(drop=True), pd.DataFrame(summary)
