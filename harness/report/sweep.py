"""Sweep selection: per (run, task, label), the trial with the best mean validation metric over seeds.

A suite's `sweep:` runs the same trials (training/model values) for every attention; every trial
cell stores its metrics on the validation split. Here each label keeps only its chosen trial's
cells, so every other table reports the tuned models on test; the `sweep` table lists every
trial's validation score and marks the choice. Only trials with a result for every seed of the
label compete (a trial that lost a seed would be judged on fewer examples of noise); the
direction is the metric's declared one; ties go to the earlier trial. With the sweep's
`select_seeds`, the choice reads those seeds only (as the executor did when it ran the chosen
trial at the other seeds).
"""

from __future__ import annotations

import math

import pandas as pd

from attnbench.metrics import metric_direction
from attnbench.report.stats import summarize
from attnbench.report.table import Table, fmt
from attnbench.sweep import best_trial


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
    """Cells with only each label's chosen trial left, and the per-trial summary (None without a sweep);
    `select_seeds`: per run tag, the seeds the choice reads (None: every seed)."""
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
            s = summarize(scores[int(t)])
            summary.append(
                {
                    "run": run,
                    "task": task,
                    "label": label,
                    "trial": int(t),
                    "metric": metric,
                    "direction": direction,
                    "values": g["values"].iloc[0],
                    "validation_mean": s["mean"],
                    "validation_std": s["std"],
                    "seeds_ok": s["n"],
                    "seeds": seeds,
                    "competed": s["n"] == seeds or not complete,
                    "chosen": int(t) == chosen,
                    "select_seeds": drawn,
                }
            )
    return cells.drop(index=drop).reset_index(drop=True), pd.DataFrame(summary)


def sweep_table(summary: pd.DataFrame | None) -> Table | None:
    """Per (task, label): the chosen trial's values and validation score, and how many trials competed.
    Long: one table's columns in the order they are shown."""
    if summary is None or summary.empty:
        return None
    many_runs = summary["run"].nunique() > 1
    data, text_rows = [], []
    for (run, task, label), part in summary.groupby(["run", "task", "label"], sort=True):
        chosen = part[part["chosen"]]
        row = chosen.iloc[0] if len(chosen) else part.iloc[0]
        values = row["values"] if len(chosen) else {}
        data.append(
            {
                "run": run,
                "task": task,
                "label": label,
                "trials": len(part),
                "complete_trials": int((part["seeds_ok"] == part["seeds"]).sum()),
                "metric": row["metric"],
                "chosen_trial": int(row["trial"]) if len(chosen) else None,
                **{f"chosen_{k}": v for k, v in values.items()},
                "validation_mean": row["validation_mean"] if len(chosen) else math.nan,
                "validation_std": row["validation_std"] if len(chosen) else math.nan,
            }
        )
        text_rows.append(
            ({"run": run} if many_runs else {})
            | {
                "task": task,
                "label": label,
                "trials (complete)": f"{len(part)} ({data[-1]['complete_trials']})",
                "chosen": ", ".join(f"{k}={fmt(v) if isinstance(v, float) else v}" for k, v in values.items()) or "—",
                f"validation {row['metric']}": fmt(data[-1]["validation_mean"])
                + (f" ± {fmt(data[-1]['validation_std'])}" if math.isfinite(data[-1]["validation_std"]) else ""),
                "runner-up": _runner_up(part),
            }
        )
    text = pd.DataFrame(text_rows)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    budgets = sorted({d["trials"] for d in data})
    notes = [
        "Each label was trained once per trial (the same trials for every label) and keeps the trial with the "
        "best mean validation score over seeds (direction as the metric declares; only trials with every seed "
        "compete; ties: the earlier trial); every other table shows the chosen trial's test results. "
        "Validation: mean ± std over seeds."
    ]
    notes.append(
        "Equal budget: every label had "
        + (f"{budgets[0]} trials." if len(budgets) == 1 else f"a different number of trials ({budgets}): NOT equal.")
    )
    drawn = sorted({tuple(x) for x in summary["select_seeds"] if x is not None}) if "select_seeds" in summary else []
    for seeds in drawn:
        named = ", ".join(map(str, seeds))
        notes.append(
            f"Trials ran at seed{'s' * (len(seeds) > 1)} {named} only and were chosen on "
            f"{'their' if len(seeds) > 1 else 'its'} validation score; each label's chosen trial then "
            "trained at the suite's other seeds, so the test tables hold every seed of the chosen trial."
        )
    return Table(
        "sweep",
        "Sweep: chosen training values per attention (on validation)",
        pd.DataFrame(data),
        text,
        best,
        notes,
        key_columns=3 if many_runs else 2,
    )


def _runner_up(part: pd.DataFrame) -> str:
    """The best validation mean among the other trials that competed (what the choice won by)."""
    others = part[~part["chosen"] & part["competed"]]["validation_mean"].dropna()
    if others.empty:
        return "—"
    direction = part["direction"].iloc[0]
    return fmt(others.max() if direction == "max" else others.min())
