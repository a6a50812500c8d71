"""Accuracy tables from stored cell results: one per task (of any measurement), the leaderboard across tasks, and
the list of cells without results; `all_tables` gathers every table the results support, in report order: the
registered sections' (`attnbench.report.sections`), a per-task table for each measurement no section shows in
full, and the cells without results. Every interval, rank, bold mark and chance verdict comes from the inference
engine (`attnbench.report.inference`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.metrics import headline_metric, metric_exact, metric_info, metric_timed
from attnbench.report import inference
from attnbench.report.load import Results, not_ok
from attnbench.report.sections import SectionGuard, report_sections
from attnbench.report.table import DASH, Table, finite, fmt, slug
from attnbench.results import metric_names

METRIC_ORDER = (
    "accuracy",
    "macro_f1",
    "ece",
    "mcc",
    "balanced_accuracy",
    "roc_auc",
    "pr_auc",
    "nll",
    "brier",
    "ece_equal_mass",
    "train_seconds",
    "phase_a_seconds",
)
NOT_METRICS = ("params_total", "params_attention")  # shown as parameter counts, not ranked


REFERENCE_NOTE = (
    "(reference): an attention-free reference model (majority class; TF-IDF + logistic regression "
    "with C chosen on validation) on the same splits; shown for scale, not ranked, never bold."
)


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


def _ranked(metric: str) -> bool:
    """Whether a metric's labels are ranked: it declares a direction and is not a wall-clock figure (times are
    compared only through a timing check)."""
    info = metric_info(metric)
    return info is not None and info.direction is not None and not info.timed


def _metric_names(cells: pd.DataFrame) -> list[str]:
    return _ordered_metrics(metric_names(cells))


def _cell_text(row: pd.Series | None, metric: str, row_seeds: int) -> str:
    """A label's metric as a table shows it: interval (per-seed values under 5 seeds; an exact metric's only where
    they differ), n where it has fewer seeds than its row, and its rank where the metric is ranked."""
    if row is None or not finite(row["mean"]):
        return DASH
    if metric_exact(metric):
        text = inference.exact_text(metric, row["mean"], row["values"])
    else:
        text = inference.interval_text(row["mean"], row["low"], row["high"], row["values"])
    if row["n_seeds"] != row_seeds:
        text += f" n={int(row['n_seeds'])}"
    if _ranked(metric) and finite(row["rank"]):
        text += f" (rank {inference.rank_text(row)})"
    return text


def task_table(results: Results, task: str, measurement: str = "accuracy") -> Table:
    """One row per attention label on a task: every metric's mean [interval] (per-seed values under 5 seeds) from
    the inference engine, ranked by mean with the rank's confidence set where the metric has a direction (times
    are not ranked); bold: each ranked metric's best set; parameter counts; for accuracy, the label against
    chance.
    Long: one table's columns in the order they are shown (metrics with intervals, ranks, parameter counts,
    chance, problems), each reading the same standings."""
    cells = results.cells[(results.cells["measurement"] == measurement) & (results.cells["task"] == task)]
    ok = results.of(measurement)
    ok = ok[ok["task"] == task]
    labels = sorted(set(cells["label"].dropna()))
    references = results.reference_labels()
    metrics = _metric_names(ok)
    found = {m: inference.label_standings(ok, m, references) for m in metrics}
    lead = headline_metric(metrics)
    chance = (
        inference.chance_verdicts(ok, inference.run_settings(results), references)
        if measurement == "accuracy"
        else None
    )
    chance_of = {} if chance is None else dict(zip(chance["label"], chance["word"]))
    seeds = {lab: int(ok.loc[ok["label"] == lab, "seed"].nunique()) for lab in labels}

    def lead_key(lab: str) -> tuple:
        row = found[lead].get(lab) if lead else None
        rank = float(row["rank"]) if row is not None and finite(row["rank"]) else math.inf
        return (lab in references, rank, lab)

    order = sorted(labels, key=lead_key)
    params = {
        (lab, kind): float(np.mean(values)) if (values := _values(ok, lab, kind)) else math.nan
        for lab in labels
        for kind in NOT_METRICS
    }
    data_rows, text_rows = [], []
    for lab in order:
        row: dict[str, object] = {"label": lab, "reference": lab in references, "seeds": seeds[lab]}
        row |= {kind: params[(lab, kind)] for kind in NOT_METRICS}
        text = {
            "label": shown_label(lab, references),
            "seeds": str(seeds[lab]),
            "params": fmt(params[(lab, "params_total")], 0),
            "attention params": fmt(params[(lab, "params_attention")], 0),
        }
        if chance is not None:
            row["chance"] = chance_of.get(lab, np.nan)
            text["vs chance"] = chance_of.get(lab) or DASH
        for m in metrics:
            standing = found[m].get(lab)
            row |= inference.standing_columns(f"{m}_", standing)
            text[m] = _cell_text(standing, m, seeds[lab])
        data_rows.append(row)
        text_rows.append(text)
    columns = ["label", "seeds", "params", "attention params", *(["vs chance"] if chance is not None else []), *metrics]
    text = pd.DataFrame(text_rows, columns=columns)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    for m in metrics:
        if _ranked(m):
            best[m] = found[m].marks(order)
    timed = [m for m in metrics if metric_timed(m)]
    notes = [inference.STANDINGS_NOTE + (" Times (" + ", ".join(timed) + ") are not ranked: they swing with the "
             "machine's load; the efficiency suite compares them with its timing check." if timed else "")]  # fmt: skip
    if chance is not None and len(chance):
        notes.append(inference.chance_note(chance, inference.run_settings(results)))
    notes += [n for n in (inference.exact_note([m for m in metrics if metric_exact(m)]),) if n]
    notes += [n for n in (inference.variance_note(s.table.assign(metric=m) for m, s in found.items()),) if n]
    notes += inference.left_out_notes(found)
    if references:
        notes.append(REFERENCE_NOTE)
    for lab in labels:
        if seeds[lab] < cells[cells["label"] == lab]["seed"].nunique():
            notes.append(f"{lab}: some seeds have no result ({_problem_text(results, measurement, task, lab)}).")
    name, title = (
        (f"task_{slug(task)}", f"Task {task}: metrics per attention")
        if measurement == "accuracy"
        else (f"{slug(measurement)}_{slug(task)}", f"Measurement {measurement} on {task}: metrics per attention")
    )
    return Table(name, title, pd.DataFrame(data_rows), text, best, notes)


def _values(cells: pd.DataFrame, label: str, metric: str) -> list[float]:
    """A label's finite values of a metric over its cells (one per seed)."""
    values = [m.get(metric) for m in cells.loc[cells["label"] == label, "metrics"]]
    return [float(v) for v in values if finite(v)]


def leaderboard_table(results: Results) -> Table:
    """Per task: accuracy mean [interval] with its rank (and the rank's confidence set) from the inference engine,
    and the label against chance; across tasks: on how many tasks a label is in the best set.

    No average over tasks of different scales: each task is ranked on its own, and a label is compared only
    with labels measured on the same task.
    Long: the per-task columns and the across-task count come from one pass over the same standings."""
    cells = results.cells[results.cells["measurement"] == "accuracy"]
    ok = results.of("accuracy")
    tasks = sorted(set(cells["task"].dropna()))
    labels = sorted(set(cells["label"].dropna()))
    references = results.reference_labels()
    settings = inference.run_settings(results)
    found = {t: inference.label_standings(ok[ok["task"] == t], "accuracy", references) for t in tasks}
    chance = inference.chance_verdicts(ok, settings, references)
    chance_of = {(r.task, r.label): r.word for r in chance.itertuples()} if chance is not None else {}
    rows, text_rows, missing = [], [], []
    for lab in labels:
        mine = {t: row for t in tasks if (row := found[t].get(lab)) is not None and finite(row["mean"])}
        missing += [f"{lab} × {t} ({_problem_text(results, 'accuracy', t, lab)})" for t in tasks if t not in mine]
        best_in = [t for t, s in mine.items() if lab not in references and found[t].in_best_set(lab)]
        ranks = [float(s["rank"]) for s in mine.values() if finite(s["rank"]) and lab not in references]
        row: dict[str, object] = {
            "label": lab,
            "reference": lab in references,
            "tasks": len(mine),
            "best_set_tasks": len(best_in),
            "at_chance_tasks": sum(chance_of.get((t, lab)) == inference.AT_CHANCE for t in mine),
            "mean_rank": float(np.mean(ranks)) if ranks else np.nan,
        }
        text = {
            "label": shown_label(lab, references),
            "tasks": f"{len(mine)}/{len(tasks)}",
            "best set": DASH if lab in references or not mine else f"{len(best_in)} of {len(mine)}",
        }
        for t in tasks:
            standing = found[t].get(lab)
            row |= inference.standing_columns(f"{t}:", standing)
            row[f"{t}:chance"] = chance_of.get((t, lab), np.nan)
            shown = _cell_text(standing, "accuracy", int(standing["n_seeds"]) if standing is not None else 0)
            word = chance_of.get((t, lab))
            if word not in (None, inference.ABOVE_CHANCE) and shown != DASH:
                shown += f" ({word})"
            text[f"{t} accuracy"] = shown
        rows.append(row)
        text_rows.append(text)
    data = pd.DataFrame(rows)
    if len(data):
        order = (
            data.assign(_best=-data["best_set_tasks"])
            .sort_values(["reference", "_best", "mean_rank", "label"], na_position="last")
            .index
        )
    else:
        order = data.index
    data, text = data.loc[order].reset_index(drop=True), pd.DataFrame(text_rows).loc[order].reset_index(drop=True)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    for t in tasks:
        best[f"{t} accuracy"] = found[t].marks(list(data["label"]))
    notes = [
        "Each task is ranked on its own (labels are compared only with labels measured on the same task); there is "
        "no average over tasks of different scales. tasks: how many tasks the label has; best set: on how many of "
        "them no other label is detectably better (rows in that order, then by mean rank). " + inference.STANDINGS_NOTE
    ]
    if chance is not None and len(chance):
        notes.append(inference.chance_note(chance, settings))
    notes += [n for n in (inference.variance_note(s.table for s in found.values()),) if n]
    if references:
        notes.append(REFERENCE_NOTE)
    if missing:
        notes.append(
            "Missing (shown as —, left out of every average and rank, never counted as zero): "
            + "; ".join(missing)
            + "."
        )
    return Table("leaderboard", "Leaderboard across tasks", data, text, best, notes)


def headline_summary(leaderboard: Table) -> list[str]:
    """Sentences for the top of a report from the leaderboard: per task, the best set (or that no label is
    detectably better than another), and the labels at chance."""
    data, out = leaderboard.data, []
    ranked = ~data["reference"].astype(bool) if len(data) else pd.Series(dtype=bool)
    for column in [c for c in data.columns if c.endswith(":best_set")]:
        task = column[: -len(":best_set")]
        present = ranked & data[f"{task}:mean"].notna()
        best = list(data.loc[present & (data[column] == True), "label"])  # noqa: E712 - NaN: no standing
        if best and len(best) < int(present.sum()):
            out.append(f"{task}: best set (no other label detectably better): {', '.join(best)}.")
        elif int(present.sum()) > 1:
            out.append(f"{task}: no label is detectably better than another ({int(present.sum())} labels).")
        chance = list(data.loc[data[f"{task}:chance"] == inference.AT_CHANCE, "label"])
        if chance:
            out.append(f"{task}: at chance (accuracy equivalent to the majority class's share): {', '.join(chance)}.")
    return out


def problems_table(results: Results) -> Table | None:
    """Cells that did not finish ok (failed, skipped, unreadable) with their reasons."""
    bad = not_ok(results).reset_index(drop=True)
    if bad.empty:
        return None
    bad["seed"] = bad["seed"].astype("Int64")
    shown = bad.assign(file=[Path(f).name for f in bad["file"]])
    text = shown.astype(object).where(shown.notna(), DASH).astype(str)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    return Table(
        "cells_not_ok",
        "Cells without results (failed, skipped, unreadable)",
        bad,
        text,
        best,
        ["These cells are left out of every table above; their reasons are as recorded."],
        key_columns=len(text.columns),
    )


def all_tables(results: Results, guard: SectionGuard | None = None) -> list[Table]:
    """Every table the results support, in report order: each registered section's (a failing one named in
    `guard` and left out), then one per task of every measurement no section shows in full, then the cells without
    results."""
    sections = report_sections()
    tables = (guard or SectionGuard()).parts(sections, "tables", results)
    shown = {measurement for section in sections for measurement in section.measurements}
    other = results.ok[~results.ok["measurement"].isin(shown)]
    tables += [
        task_table(results, str(task), str(m)) for (m, task), _ in other.groupby(["measurement", "task"], sort=True)
    ]
    tables.append(problems_table(results))
    return [t for t in tables if t is not None]
