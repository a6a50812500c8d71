"""The sweep table: per (run, task, label), every trial's validation score and the one chosen.

A suite's `sweep:` runs the same trials (training/model values) for every attention; every trial cell stores its
metrics on the validation split. Which trial each label keeps is chosen when the results are read
(`attnbench.sweep.select_trials`: the best mean validation score over seeds, among the trials with every seed;
the metric's declared direction; ties to the earlier trial; with the sweep's `select_seeds`, on those seeds only),
so every other table reports the tuned models on test; this table lists the trials and marks the choice.
"""

from __future__ import annotations

import math

import pandas as pd

from attnbench.report.stats import summarize
from attnbench.report.table import Table, fmt
from attnbench.sweep import select_trials as select_trials


def _validation(summary: pd.DataFrame) -> pd.DataFrame:
    """Each trial's validation mean and sample std over its seeds' scores (`report.stats.summarize`)."""
    found = [summarize(scores) for scores in summary["scores"]]
    return summary.assign(validation_mean=[f["mean"] for f in found], validation_std=[f["std"] for f in found])


def sweep_table(summary: pd.DataFrame | None) -> Table | None:
    """Per (task, label): the chosen trial's values and validation score, and how many trials competed.
    Long: one table's columns in the order they are shown."""
    if summary is None or summary.empty:
        return None
    summary = _validation(summary)
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
