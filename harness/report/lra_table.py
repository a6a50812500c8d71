"""The LRA-style table: test accuracy per attention and task (mean and 95% interval), the average, and per task
how many attention pairs are ahead / behind / equivalent / undecided; and the verdict on every pair.

Shown when a run holds accuracy cells of the Long Range Arena tasks (`LRA_TASKS`). Every interval, verdict, rank
and bold mark is the inference engine's (`attnbench.report.inference`): all pairs of a task corrected together at
the suite's margin and correction; bold marks each task's best set, never a point estimate.
A cell whose model breaks LRA's parameter rule (accuracy option parameter_tolerance) against the suite's reference
row on the same task (parameter_reference, softmax by default) is flagged. Registered as
the report section `lra`, after the accuracy tables.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from attnbench.parameter_budget import parameter_rule
from attnbench.report import inference
from attnbench.report.load import Results
from attnbench.report.paired import verdict_cells
from attnbench.report.sections import register_report_section
from attnbench.report.table import DASH, Table, finite, fmt

LRA_TASKS = ("listops", "byte_text", "byte_retrieval", "pixels", "pathfinder")  # LRA's column order
RANK_METRIC = "accuracy"
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


def _tasks(cells: pd.DataFrame) -> list[str]:
    """The LRA tasks present (keys such as 'pathfinder(resolution=32)' included), in LRA's order."""
    present = {str(t) for t in cells["task"].dropna() if str(t).split("(")[0] in LRA_TASKS}
    return sorted(present, key=lambda t: (LRA_TASKS.index(t.split("(")[0]), t))


def lra_tables(results: Results) -> list[Table]:
    """The LRA-style accuracy table and the verdict on every pair, when the run has LRA tasks.
    Long: LRA's one layout (a column per task in LRA's order, chance and the parameter rule's marks, the average,
    the pair counts) and the pairs table, both from the same standings and pairs."""
    cells = results.of("accuracy")
    cells = cells[cells["attention"] != "reference"]
    tasks = _tasks(cells)
    if not tasks:
        return []
    cells = cells[cells["task"].isin(tasks)]
    labels = sorted(set(cells["label"].dropna()))
    settings = inference.run_settings(results)
    pairs = inference.pairs(cells, RANK_METRIC, settings)
    standings = {task: inference.label_standings(cells[cells["task"] == task], RANK_METRIC) for task in tasks}
    chance = inference.chance_verdicts(cells, settings)
    chance_of = {(r.task, r.label): r.word for r in chance.itertuples()} if chance is not None else {}
    data_rows, text_rows, flagged = [], [], []
    for lab in labels:
        row: dict[str, Any] = {"label": lab}
        text: dict[str, str] = {"attention": lab}
        for task in tasks:
            standing = standings[task].get(lab)
            row |= inference.standing_columns(f"{task}:", standing)
            verdict = parameter_verdict(cells, task, lab)
            row[f"{task}:params_ratio"] = verdict["ratio"] if verdict else math.nan
            row[f"{task}:breaks_parameter_rule"] = verdict is not None and not verdict["within"]
            row[f"{task}:chance"] = chance_of.get((task, lab), np.nan)
            shown = (
                DASH
                if standing is None
                else inference.interval_text(
                    standing["mean"], standing["low"], standing["high"], standing["values"], scale=100, decimals=1
                )  # fmt: skip
            )
            if chance_of.get((task, lab)) not in (None, inference.ABOVE_CHANCE) and shown != DASH:
                shown += f" ({chance_of[(task, lab)]})"
            if row[f"{task}:breaks_parameter_rule"]:
                shown += FLAG
                flagged.append(f"{lab} × {task} ({verdict['ratio']:.2f}× {verdict['reference']}'s)")
            text[task] = shown
        means = [row[f"{t}:mean"] for t in tasks]
        row["average"] = float(np.mean(means)) if all(finite(m) for m in means) else math.nan
        text["average"] = fmt(100 * row["average"], 1)
        data_rows.append(row)
        text_rows.append(text)
    count = {"attention": "pairs: " + " / ".join(inference.VERDICTS)}
    for task in tasks:
        on = pairs[pairs["task"] == task] if len(pairs) else pairs
        count[task] = " / ".join(str(n) for n in inference.verdict_counts(on).values()) if len(on) else DASH
    count["average"] = ""
    text = pd.DataFrame(text_rows + [count])
    data = pd.DataFrame(data_rows)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    for task in tasks:
        best.loc[: len(labels) - 1, task] = standings[task].marks(labels)
    notes = [
        "Test accuracy in %, mean over seeds [95% interval] (each seed's value beside it under "
        f"{inference.FEW_SEEDS} seeds); average: the mean of the task means (a dash where a task is missing; not "
        "ranked: no test spans tasks). Columns in LRA's order (ListOps, Text, Retrieval, Image, Pathfinder); the "
        "ranks are in the CSV (<task>:rank, rank_low, rank_high). " + inference.STANDINGS_NOTE,
        "pairs: of all attention pairs on the task, how many are ahead / behind (a against b, labels in "
        "alphabetical order) / equivalent / undecided; the pairs are listed in the table lra_pairs. "
        + inference.method_note(RANK_METRIC, settings),
    ]
    notes += [n for n in (inference.variance_note([pairs]),) if n]
    if chance is not None and len(chance):
        notes.append(inference.chance_note(chance, settings))
    if flagged:
        notes.append(
            f"{FLAG.strip()}: the model breaks LRA's parameter rule (parameters not within the "
            "tolerance of the reference row's on the same task, the suite's softmax row unless the accuracy "
            "option parameter_reference names another): " + "; ".join(flagged) + "."
        )
    tables = [Table("lra", "Long Range Arena: test accuracy per task", data, text, best, notes)]
    if len(pairs):
        shown = pd.DataFrame(
            [{"task": r.task, "a": r.label_a, "b": r.label_b} | verdict_cells(r) for r in pairs.itertuples()]
        )
        marks = pd.DataFrame(False, index=shown.index, columns=shown.columns)
        marks["verdict"] = pairs["verdict"].isin(["ahead", "behind", "equivalent"]).to_numpy()
        tables.append(
            Table(
                "lra_pairs",
                "Long Range Arena: the verdict on every attention pair per task",
                inference.pair_data(pairs),
                shown,
                marks,
                [
                    "Every pair of attentions on every LRA task, a against b. "
                    + inference.method_note(RANK_METRIC, settings)
                ],
                key_columns=3,
            )
        )
    return tables


register_report_section("lra", order=20, tables=lra_tables)
