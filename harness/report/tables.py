"""Accuracy tables from stored cell results: one per task, the leaderboard across tasks, and the list
of cells without results; `all_tables` gathers every table the results support, in report order."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.report.load import Results, metric_frame, not_ok
from attnbench.report.lra_table import lra_tables
from attnbench.report.kernel_tables import kernel_tables
from attnbench.report.measurement_tables import (coulomb_table, efficiency_table, fidelity_table,
                                               paired_table, robustness_tables)
from attnbench.report.paired import paired_comparison_table
from attnbench.report.published import published_table
from attnbench.report.stats import metric_direction, rank, summarize
from attnbench.report.sweep import sweep_table
from attnbench.report.table import DASH, Table, best_mask, finite, fmt, fmt_summary, slug

HEADLINE = ("accuracy", "macro_f1", "ece")
METRIC_ORDER = ("accuracy", "macro_f1", "ece", "mcc", "balanced_accuracy", "roc_auc", "pr_auc", "nll",
                "brier", "ece_equal_mass", "train_seconds", "phase_a_seconds")
NOT_METRICS = ("params_total", "params_attention")  # shown as parameter counts, not ranked
BUILTIN_MEASUREMENTS = ("accuracy", "robustness", "efficiency", "fidelity", "kernel")


REFERENCE_NOTE = ("(reference): an attention-free reference model (majority class; TF-IDF + logistic regression "
                  "with C chosen on validation) on the same splits; shown for scale, not ranked, never bold.")


def shown_label(label: str, references: set[str]) -> str:
    """The label as a table shows it: references marked."""
    return f"{label} (reference)" if label in references else label


def _ordered_metrics(names: set[str]) -> list[str]:
    known = [m for m in METRIC_ORDER if m in names]
    return known + sorted(names - set(known) - set(NOT_METRICS))


def _problem_text(results: Results, measurement: str, task: str | None, label: str) -> str:
    """'failed: reason; skipped: reason' for a (measurement, task, label), or 'no result'."""
    bad = not_ok(results)
    bad = bad[(bad["measurement"] == measurement) & (bad["label"] == label)]
    if task is not None:
        bad = bad[bad["task"] == task]
    if bad.empty:
        return "no result"
    parts = sorted({f"{r.status}: {r.reason or 'no reason given'}" for r in bad.itertuples()})
    return "; ".join(parts)


def task_table(results: Results, task: str, measurement: str = "accuracy") -> Table:
    """One row per attention label on a task: every metric as mean ± std [CI] (rank), n, params."""
    frame = metric_frame(results, measurement)
    frame = frame[frame["task"] == task]
    cells = results.cells[(results.cells["measurement"] == measurement) & (results.cells["task"] == task)]
    labels = sorted(set(cells["label"].dropna()))
    metrics = _ordered_metrics(set(frame["metric"]))
    stats = {(lab, m): summarize(frame[(frame["label"] == lab) & (frame["metric"] == m)]["value"])
             for lab in labels for m in metrics}
    means = pd.DataFrame({m: [stats[(lab, m)]["mean"] for lab in labels] for m in metrics}, index=labels)
    references = results.reference_labels()
    ranked = means.drop(index=[lab for lab in labels if lab in references])
    ranks = pd.DataFrame({m: rank(ranked[m], metric_direction(m)) if metric_direction(m) else np.nan
                          for m in metrics}, index=ranked.index).reindex(labels)
    acc_rank = ranks["accuracy"] if "accuracy" in ranks else pd.Series(np.nan, index=labels)
    order = sorted(labels, key=lambda lab: (acc_rank[lab] if finite(acc_rank[lab]) else math.inf, lab))
    seeds = {lab: int(frame[frame["label"] == lab]["seed"].nunique()) for lab in labels}
    params = {(lab, kind): summarize(frame[(frame["label"] == lab) & (frame["metric"] == kind)]["value"])["mean"]
              for lab in labels for kind in NOT_METRICS}
    data_rows, text_rows = [], []
    for lab in order:
        row = {"label": lab, "reference": lab in references, "seeds": seeds[lab],
               **{kind: params[(lab, kind)] for kind in NOT_METRICS}}
        text = {"label": shown_label(lab, references), "seeds": str(seeds[lab]),
                "params": fmt(params[(lab, "params_total")], 0),
                "attention params": fmt(params[(lab, "params_attention")], 0)}
        for m in metrics:
            s = stats[(lab, m)]
            row.update({f"{m}_mean": s["mean"], f"{m}_std": s["std"], f"{m}_n": s["n"],
                        f"{m}_ci_low": s["ci_low"], f"{m}_ci_high": s["ci_high"], f"{m}_rank": ranks.at[lab, m]})
            text[m] = fmt_summary(s, ranks.at[lab, m], seeds[lab])
        data_rows.append(row)
        text_rows.append(text)
    text = pd.DataFrame(text_rows, columns=["label", "seeds", "params", "attention params", *metrics])
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    for m in metrics:
        best[m] = [ranks.at[lab, m] == 1 and ranked[m].nunique() > 1 for lab in order]  # no mark if all tie
    notes = ["Cells: mean ± sample std over seeds, [95% t-interval] where n ≥ 3, (rank; 1 = best, "
             "direction-aware). Bold: best in column. n shown where a metric has fewer seeds than the row."]
    if references:
        notes.append(REFERENCE_NOTE)
    for lab in labels:
        if seeds[lab] < cells[cells["label"] == lab]["seed"].nunique():
            notes.append(f"{lab}: some seeds have no result ({_problem_text(results, measurement, task, lab)}).")
    if measurement == "accuracy":
        return Table(f"task_{slug(task)}", f"Task {task}: metrics per attention", pd.DataFrame(data_rows),
                     text, best, notes)
    return Table(f"{slug(measurement)}_{slug(task)}", f"Measurement {measurement} on {task}: metrics per attention",
                 pd.DataFrame(data_rows), text, best, notes)


def leaderboard_table(results: Results) -> Table:
    """Across tasks: average rank and mean of the headline metrics; missing cells are dashes, not zeros."""
    frame = metric_frame(results, "accuracy")
    cells = results.cells[results.cells["measurement"] == "accuracy"]
    tasks = sorted(set(cells["task"].dropna()))
    labels = sorted(set(cells["label"].dropna()))
    per = {(t, lab, m): summarize(frame[(frame["task"] == t) & (frame["label"] == lab)
                                        & (frame["metric"] == m)]["value"])
           for t in tasks for lab in labels for m in HEADLINE}
    references = results.reference_labels()
    rank_parts = {lab: [] for lab in labels}
    for t in tasks:
        for m in HEADLINE:
            means = pd.Series({lab: per[(t, lab, m)]["mean"] for lab in labels if lab not in references}, dtype=float)
            for lab, r in rank(means, metric_direction(m)).items():
                if finite(r):
                    rank_parts[lab].append(r)
    rows, text_rows, missing = [], [], []
    for lab in labels:
        present = [t for t in tasks if per[(t, lab, "accuracy")]["n"] > 0]
        missing += [f"{lab} × {t} ({_problem_text(results, 'accuracy', t, lab)})" for t in tasks if t not in present]
        row = {"label": lab, "reference": lab in references, "tasks": len(present),
               "avg_rank": float(np.mean(rank_parts[lab])) if rank_parts[lab] else np.nan}
        for m in HEADLINE:
            vals = [per[(t, lab, m)]["mean"] for t in tasks if per[(t, lab, m)]["n"] > 0]
            row[f"{m}_mean"] = float(np.mean(vals)) if vals else np.nan
        for t in tasks:
            row[f"{t}:accuracy_mean"] = per[(t, lab, "accuracy")]["mean"]
            row[f"{t}:accuracy_std"] = per[(t, lab, "accuracy")]["std"]
            row[f"{t}:accuracy_n"] = per[(t, lab, "accuracy")]["n"]
        rows.append(row)
        text = {"label": shown_label(lab, references), "tasks": f"{len(present)}/{len(tasks)}",
                "avg rank": fmt(row["avg_rank"], 2)}
        text.update({f"mean {m}": fmt(row[f"{m}_mean"]) for m in HEADLINE})
        text.update({f"{t} accuracy": fmt_summary(per[(t, lab, "accuracy")]) for t in tasks})
        text_rows.append(text)
    data = pd.DataFrame(rows)
    order = data.sort_values(["avg_rank", "label"], na_position="last").index if len(data) else data.index
    data, text = data.loc[order].reset_index(drop=True), pd.DataFrame(text_rows).loc[order].reset_index(drop=True)
    numeric = pd.DataFrame({"avg rank": data["avg_rank"],
                            **{f"mean {m}": data[f"{m}_mean"] for m in HEADLINE},
                            **{f"{t} accuracy": data[f"{t}:accuracy_mean"] for t in tasks}})
    directions = {"avg rank": "min", **{f"mean {m}": metric_direction(m) for m in HEADLINE},
                  **{f"{t} accuracy": "max" for t in tasks}}
    best = best_mask(numeric.mask(data["reference"].astype(bool), np.nan), directions)
    best = best.reindex(columns=text.columns, fill_value=False)
    notes = ["Means are over the tasks each label has (its own n); avg rank = mean, over tasks and the headline "
             "metrics (accuracy, macro-F1, ECE), of the label's rank on that task (1 = best). "
             "Per-task cells: mean ± std over seeds. Bold: best in column."]
    if references:
        notes.append(REFERENCE_NOTE)
    if missing:
        notes.append("Missing (shown as —, left out of every average and rank, never counted as zero): "
                     + "; ".join(missing) + ".")
    return Table("leaderboard", "Leaderboard across tasks", data, text, best, notes)


def problems_table(results: Results) -> Table | None:
    """Cells that did not finish ok (failed, skipped, unreadable) with their reasons."""
    bad = not_ok(results).reset_index(drop=True)
    if bad.empty:
        return None
    bad["seed"] = bad["seed"].astype("Int64")
    shown = bad.assign(file=[Path(f).name for f in bad["file"]])
    text = shown.astype(object).where(shown.notna(), DASH).astype(str)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    return Table("cells_not_ok", "Cells without results (failed, skipped, unreadable)", bad, text, best,
                 ["These cells are left out of every table above; their reasons are as recorded."],
                 key_columns=len(text.columns))


def all_tables(results: Results) -> list[Table]:
    """Every table the results support, in report order."""
    tasks = sorted(set(results.cells.loc[results.cells["measurement"] == "accuracy", "task"].dropna()))
    tables: list[Table | None] = [leaderboard_table(results) if tasks else None]
    tables += [task_table(results, t) for t in tasks]
    tables += lra_tables(results)
    tables += [paired_comparison_table(results), published_table(results), sweep_table(results.sweep)]
    tables += [*robustness_tables(results), efficiency_table(results), paired_table(results),
               fidelity_table(results), coulomb_table(results), *kernel_tables(results)]
    other = results.ok[~results.ok["measurement"].isin(BUILTIN_MEASUREMENTS)]  # plug-in measurements
    tables += [task_table(results, str(task), str(m))
               for (m, task), _ in other.groupby(["measurement", "task"], sort=True)]
    tables.append(problems_table(results))
    return [t for t in tables if t is not None]
