"""The LRA-style table: test accuracy per attention and task (mean and 95% interval over seeds), the average,
and per task how many attention pairs it separates; and the list of those pairs.

Shown when a run holds accuracy cells of the Long Range Arena tasks (`LRA_TASKS`). A pair is separated on
a task when the 95% t-interval of the per-seed accuracy difference excludes 0 and the per-example test
(exact McNemar per seed, combined across seeds) gives p < 0.05: the verdict of the paired comparisons
(`attnbench.report.paired.paired_difference`), applied to every pair. Bold marks each task's top group
(`attnbench.report.ranking`), never a point estimate.
A cell whose model breaks LRA's parameter rule (accuracy option parameter_tolerance) against the suite's reference
row on the same task (parameter_reference, softmax by default) is flagged. Registered as
the report section `lra`, after the accuracy tables.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pandas as pd

from attnbench.parameter_budget import parameter_rule
from attnbench.report.load import Results
from attnbench.report.paired import ALPHA, DETECTED, PredictionCache, cells_by_seed, paired_difference
from attnbench.report.ranking import RANK_METRIC, ranking_note, task_standings, top_group_marks
from attnbench.report.sections import register_report_section
from attnbench.report.stats import summarize
from attnbench.report.table import DASH, Table, fmt

LRA_TASKS = ("listops", "byte_text", "byte_retrieval", "pixels", "pathfinder")  # LRA's column order
FLAG = " ⚑"
SOFTMAX = "softmax"  # the reference label of cells that name none (the accuracy option's default)


def parameter_verdict(cells: pd.DataFrame, task: str, label: str) -> dict[str, Any] | None:
    """LRA's parameter rule for `label` on `task`: its parameter count against the reference row's (the label
    its cells name, `parameter_reference`; softmax for cells that name none) on the same task, within the
    tolerance its cells record; None where the rule is off or no reference cell finished."""
    mine = cells[(cells["task"] == task) & (cells["label"] == label)]
    asked = [(d or {}).get("parameter_rule") for d in mine["details"] if (d or {}).get("parameter_rule")]
    if not asked:
        return None
    reference = asked[0].get("reference", SOFTMAX)
    theirs = cells[(cells["task"] == task) & (cells["label"] == reference)]
    counts = [m.get("params_total") for m in theirs["metrics"] if m.get("params_total")]
    total = [m.get("params_total") for m in mine["metrics"] if m.get("params_total")]
    if not counts or not total:
        return None
    return {**parameter_rule(max(total), max(counts), asked[0]["tolerance"]), "reference": reference}


def separates(a: dict[int, pd.Series], b: dict[int, pd.Series], cache: PredictionCache) -> dict[str, Any]:
    """Accuracy cells of two labels on one task (keyed by seed) -> the paired interval, p and whether the task
    separates them: `paired_difference`'s verdict is a detected side, with a per-example p computed."""
    found = paired_difference(a, b, RANK_METRIC, cache)
    if found is None:
        return {"seeds": 0, "mean_diff": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p_value": math.nan,
                "separated": False}  # fmt: skip
    interval = found["interval"]
    return {
        "seeds": len(found["seeds"]),
        "mean_diff": interval["mean"],
        "ci_low": interval["ci_low"],
        "ci_high": interval["ci_high"],
        "p_value": found["p_value"],
        "separated": found["verdict"] in DETECTED and math.isfinite(found["p_value"]),
    }


def _tasks(cells: pd.DataFrame) -> list[str]:
    """The LRA tasks present (keys such as 'pathfinder(resolution=32)' included), in LRA's order."""
    present = {str(t) for t in cells["task"].dropna() if str(t).split("(")[0] in LRA_TASKS}
    return sorted(present, key=lambda t: (LRA_TASKS.index(t.split("(")[0]), t))


def pair_rows(cells: pd.DataFrame, tasks: list[str], labels: list[str], cache: PredictionCache) -> list[dict[str, Any]]:
    """Every pair of labels on every task: the paired accuracy difference and whether the task separates them."""
    rows = []
    for task in tasks:
        part = cells[cells["task"] == task]
        for a, b in itertools.combinations(labels, 2):
            left, right = cells_by_seed(part, a), cells_by_seed(part, b)
            if left and right:
                rows.append({"task": task, "a": a, "b": b, **separates(left, right, cache)})
    return rows


def lra_tables(results: Results) -> list[Table]:
    """The LRA-style accuracy table and the list of separated pairs, when the run has LRA tasks."""
    cells = results.of("accuracy")
    cells = cells[cells["attention"] != "reference"]
    tasks = _tasks(cells)
    if not tasks:
        return []
    labels = sorted(set(cells["label"].dropna()))
    cache = PredictionCache()
    pairs = pd.DataFrame(pair_rows(cells, tasks, labels, cache))
    standings = {task: task_standings(cells[cells["task"] == task], labels, cache) for task in tasks}
    data_rows, text_rows, flagged = [], [], []
    for lab in labels:
        row: dict[str, Any] = {"label": lab}
        text: dict[str, str] = {"attention": lab}
        for task in tasks:
            part = cells[(cells["task"] == task) & (cells["label"] == lab)]
            s = summarize([m["accuracy"] for m in part["metrics"]], interval_from=2)
            row |= {
                f"{task}:mean": s["mean"],
                f"{task}:ci_low": s["ci_low"],
                f"{task}:ci_high": s["ci_high"],
                f"{task}:n": s["n"],
            }
            verdict = parameter_verdict(cells, task, lab)
            row[f"{task}:params_ratio"] = verdict["ratio"] if verdict else math.nan
            row[f"{task}:breaks_parameter_rule"] = verdict is not None and not verdict["within"]
            shown = (
                DASH
                if s["n"] == 0
                else fmt(100 * s["mean"], 1)
                + (
                    f" [{fmt(100 * s['ci_low'], 1)}, {fmt(100 * s['ci_high'], 1)}]"
                    if math.isfinite(s["ci_low"])
                    else ""
                )
            )
            standing = standings[task][lab]
            row[f"{task}:rank"] = standing.rank_text
            if standing.at_chance:
                shown += " (at chance)"
            if row[f"{task}:breaks_parameter_rule"]:
                shown += FLAG
                flagged.append(f"{lab} × {task} ({verdict['ratio']:.2f}× {verdict['reference']}'s)")
            text[task] = shown
        means = [row[f"{t}:mean"] for t in tasks]
        row["average"] = float(np.mean(means)) if all(math.isfinite(m) for m in means) else math.nan
        text["average"] = fmt(100 * row["average"], 1)
        data_rows.append(row)
        text_rows.append(text)
    count = {"attention": "pairs separated"}
    for task in tasks:
        on = pairs[pairs["task"] == task] if len(pairs) else pairs
        count[task] = f"{int(on['separated'].sum())} of {len(on)}" if len(on) else DASH
    count["average"] = ""
    text = pd.DataFrame(text_rows + [count])
    data = pd.DataFrame(data_rows)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    for task in tasks:
        best.loc[: len(labels) - 1, task] = top_group_marks(standings[task], labels)
    notes = [
        "Test accuracy in %, mean over seeds [95% Student-t interval over seeds]; average: the mean of the "
        "task means (a dash where a task is missing; not ranked: no paired test spans tasks). Columns in LRA's "
        "order (ListOps, Text, Retrieval, Image, Pathfinder). Bold: the task's top group by the paired rule "
        "(the best label and every label not detectably below it; none where every label is in it); the "
        "groups' ranks are in the CSV (<task>:rank).",
        ranking_note(),
        "pairs separated: of all attention pairs on the task, how many have a paired 95% interval of the "
        "per-seed accuracy difference that excludes 0 and a per-example test (exact McNemar per seed, "
        f"combined across seeds) with p < {ALPHA}. The pairs are listed in the table lra_pairs.",
    ]
    if flagged:
        notes.append(
            f"{FLAG.strip()}: the model breaks LRA's parameter rule (parameters not within the "
            "tolerance of the reference row's on the same task, the suite's softmax row unless the accuracy "
            "option parameter_reference names another): " + "; ".join(flagged) + "."
        )
    tables = [Table("lra", "Long Range Arena: test accuracy per task", data, text, best, notes)]
    if len(pairs):
        shown = pd.DataFrame(
            [
                {
                    "task": r.task,
                    "a": r.a,
                    "b": r.b,
                    "seeds": str(r.seeds),
                    "a − b [95% CI]": fmt(r.mean_diff)
                    + (f" [{fmt(r.ci_low)}, {fmt(r.ci_high)}]" if math.isfinite(r.ci_low) else ""),
                    "p (examples)": fmt(r.p_value) if math.isfinite(r.p_value) else DASH,
                    "separated": "yes" if r.separated else "no",
                }
                for r in pairs.itertuples()
            ]
        )
        marks = pd.DataFrame(False, index=shown.index, columns=shown.columns)
        marks["separated"] = pairs["separated"].to_numpy()
        tables.append(
            Table(
                "lra_pairs",
                "Long Range Arena: which attention pairs each task separates",
                pairs,
                shown,
                marks,
                ["Every pair of attentions on every LRA task; the rule as in the table lra."],
                key_columns=3,
            )
        )
    return tables


register_report_section("lra", order=20, tables=lra_tables)
