"""Accuracy tables from stored cell results: one per task (of any measurement), the leaderboard across tasks, and
the list of cells without results; `all_tables` gathers every table the results support, in report order: the
registered sections' (`attnbench.report.sections`), a per-task table for each measurement no section shows in
full, and the cells without results."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.metrics import metric_timed
from attnbench.report.load import Results, metric_frame, not_ok
from attnbench.report.paired import ALPHA, PredictionCache
from attnbench.report.ranking import RANK_METRIC, Standing, ranking_note, task_standings, top_group_marks
from attnbench.report.sections import SectionGuard, report_sections
from attnbench.report.stats import metric_direction, summarize
from attnbench.report.table import DASH, Table, finite, fmt, fmt_summary, slug

HEADLINE = ("accuracy", "macro_f1", "ece")
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


def _accuracy_standings(results: Results, task: str, labels: list[str], cache: PredictionCache) -> dict[str, Standing]:
    """Group ranks on a task's accuracy cells of the given (non-reference) labels."""
    part = results.of("accuracy")
    return task_standings(part[part["task"] == task], labels, cache)


def task_table(results: Results, task: str, measurement: str = "accuracy") -> Table:
    """One row per attention label on a task: every metric as mean ± std [CI], n, params; accuracy ranked in
    tested groups (plug-in measurements: every declared metric ranked by its mean)."""
    frame = metric_frame(results, measurement)
    frame = frame[frame["task"] == task]
    cells = results.cells[(results.cells["measurement"] == measurement) & (results.cells["task"] == task)]
    labels = sorted(set(cells["label"].dropna()))
    metrics = _ordered_metrics(set(frame["metric"]))
    stats = {
        (lab, m): summarize(frame[(frame["label"] == lab) & (frame["metric"] == m)]["value"])
        for lab in labels
        for m in metrics
    }
    means = pd.DataFrame({m: [stats[(lab, m)]["mean"] for lab in labels] for m in metrics}, index=labels)
    references = results.reference_labels()
    ranked = means.drop(index=[lab for lab in labels if lab in references])
    cache = PredictionCache()
    standings = (
        _accuracy_standings(results, task, list(ranked.index), cache)
        if measurement == "accuracy" and RANK_METRIC in metrics
        else {}
    )
    grouped = (  # a plug-in measurement: every quality metric ranked in tested groups, times never
        {}
        if standings
        else {m: _metric_standings(results, measurement, task, list(ranked.index), cache, m) for m in metrics}
    )
    grouped = {m: found for m, found in grouped.items() if found}
    ranks = pd.DataFrame(np.nan, index=labels, columns=metrics)
    for m, found in ({RANK_METRIC: standings} if standings else grouped).items():
        ranks.loc[list(found), m] = [s.low if s.low is not None else np.nan for s in found.values()]
    first = RANK_METRIC if standings else next(iter(grouped), metrics[0] if metrics else None)
    first_rank = ranks[first] if first else pd.Series(np.nan, index=labels)
    first_mean = means[first] if first else pd.Series(np.nan, index=labels)
    sign = -1.0 if first is None or metric_direction(first) != "min" else 1.0
    order = sorted(
        labels,
        key=lambda lab: (
            first_rank[lab] if finite(first_rank[lab]) else math.inf,
            lab in references,
            round(sign * first_mean[lab], 12) if finite(first_mean[lab]) else math.inf,
            lab,
        ),
    )
    seeds = {lab: int(frame[frame["label"] == lab]["seed"].nunique()) for lab in labels}
    params = {
        (lab, kind): summarize(frame[(frame["label"] == lab) & (frame["metric"] == kind)]["value"])["mean"]
        for lab in labels
        for kind in NOT_METRICS
    }
    data_rows, text_rows = [], []
    for lab in order:
        standing = standings.get(lab)
        row = {
            "label": lab,
            "reference": lab in references,
            "seeds": seeds[lab],
            "at_chance": bool(standing and standing.at_chance),
            **{kind: params[(lab, kind)] for kind in NOT_METRICS},
        }
        shown = shown_label(lab, references) + (" (at chance)" if row["at_chance"] else "")
        text = {
            "label": shown,
            "seeds": str(seeds[lab]),
            "params": fmt(params[(lab, "params_total")], 0),
            "attention params": fmt(params[(lab, "params_attention")], 0),
        }
        for m in metrics:
            s = stats[(lab, m)]
            row.update(
                {
                    f"{m}_mean": s["mean"],
                    f"{m}_std": s["std"],
                    f"{m}_n": s["n"],
                    f"{m}_ci_low": s["ci_low"],
                    f"{m}_ci_high": s["ci_high"],
                    f"{m}_rank": ranks.at[lab, m],
                }
            )
            text[m] = fmt_summary(s, np.nan, seeds[lab])
            if m in grouped and lab in grouped[m] and text[m] != DASH:
                row[f"{m}_rank_text"] = grouped[m][lab].rank_text
                text[m] += f" ({grouped[m][lab].rank_text})"
        if standing is not None:
            row.update(
                {f"{RANK_METRIC}_rank_high": standing.high, "rank": standing.rank_text, "chance_p": standing.chance_p}
            )
            if text[RANK_METRIC] != DASH:
                text[RANK_METRIC] += f" ({standing.rank_text})"
        data_rows.append(row)
        text_rows.append(text)
    text = pd.DataFrame(text_rows, columns=["label", "seeds", "params", "attention params", *metrics])
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    if standings:
        notes = [_grouped_note(standings.values())]
        best[RANK_METRIC] = top_group_marks(standings, order)
    else:
        for m, found in grouped.items():
            best[m] = top_group_marks(found, order)
        notes = [_plugin_note(grouped, [m for m in metrics if metric_timed(m)])]
    if references:
        notes.append(REFERENCE_NOTE)
    for lab in labels:
        if seeds[lab] < cells[cells["label"] == lab]["seed"].nunique():
            notes.append(f"{lab}: some seeds have no result ({_problem_text(results, measurement, task, lab)}).")
    if measurement == "accuracy":
        return Table(
            f"task_{slug(task)}", f"Task {task}: metrics per attention", pd.DataFrame(data_rows), text, best, notes
        )
    return Table(
        f"{slug(measurement)}_{slug(task)}",
        f"Measurement {measurement} on {task}: metrics per attention",
        pd.DataFrame(data_rows),
        text,
        best,
        notes,
    )


def _metric_standings(
    results: Results, measurement: str, task: str, labels: list[str], cache: PredictionCache, metric: str
) -> dict[str, Standing]:
    """Group ranks of a plug-in measurement's metric on one task; empty for a metric that is not ranked (no
    direction, or a wall-clock figure, which swings with machine load and has no timing check here)."""
    if not metric_direction(metric) or metric_timed(metric) or not labels:
        return {}
    part = results.of(measurement)
    return task_standings(part[part["task"] == task], labels, cache, metric=metric)


def _plugin_note(grouped: dict[str, dict[str, Standing]], timed: list[str]) -> str:
    """Cells, ranks and bold of a plug-in measurement's task table."""
    note = (
        "Cells: mean ± sample std over seeds, [95% t-interval] where n ≥ 3; n shown where a metric has fewer "
        "seeds than the row. (Rank group): by the mean over seeds, a label whose paired difference with its "
        "group's best is not detectable (95% t-interval over shared seeds holds 0, or a per-example test where "
        f"the cells store predictions gives p ≥ {ALPHA}) shares the group's ranks (e.g. 1–4); bold: the top "
        "group where it leaves some label out. With one seed, no rank is claimed."
    )
    if timed:
        note += (
            " Not ranked: " + ", ".join(timed) + " (wall-clock figures, which swing with machine load; the "
            "efficiency suite compares times with its paired timing check)."
        )
    unranked = [m for m, found in grouped.items() if all(s.low is None for s in found.values())]
    if unranked:
        note += " No ranking is supported for " + ", ".join(unranked) + "."
    return note


def _grouped_note(standings: Iterable[Standing]) -> str:
    """Cells, ranks and bold of a task table whose accuracy is ranked in groups; at-chance labels named."""
    standings = list(standings)
    note = (
        "Cells: mean ± sample std over seeds, [95% t-interval] where n ≥ 3; n shown where a metric has fewer "
        "seeds than the row. Only accuracy is ranked (other metrics: see the paired table). " + ranking_note()
    )
    chance = [s.label for s in standings if s.at_chance]
    if chance:
        note += " At chance here: " + ", ".join(chance) + "."
    if standings and all(s.low is None for s in standings):
        note += (
            " No ranking is supported on this task ("
            + "; ".join(sorted({s.why_unranked or "" for s in standings}))
            + ")."
        )
    return note


def leaderboard_table(results: Results) -> Table:
    """Per task: accuracy mean ± std with its tested rank group; across tasks: how often a label is in the top group.

    No average over tasks of different scales: each task is ranked on its own, and a label is compared only
    with labels measured on the same task and seeds."""
    frame = metric_frame(results, "accuracy")
    cells = results.cells[results.cells["measurement"] == "accuracy"]
    tasks = sorted(set(cells["task"].dropna()))
    labels = sorted(set(cells["label"].dropna()))
    references = results.reference_labels()
    per = {
        (t, lab, m): summarize(frame[(frame["task"] == t) & (frame["label"] == lab) & (frame["metric"] == m)]["value"])
        for t in tasks
        for lab in labels
        for m in HEADLINE
    }
    cache = PredictionCache()
    standings = {
        t: _accuracy_standings(
            results, t, [lab for lab in labels if lab not in references and per[(t, lab, "accuracy")]["n"] > 0], cache
        )
        for t in tasks
    }
    rows, text_rows, missing = [], [], []
    for lab in labels:
        present = [t for t in tasks if per[(t, lab, "accuracy")]["n"] > 0]
        missing += [f"{lab} × {t} ({_problem_text(results, 'accuracy', t, lab)})" for t in tasks if t not in present]
        mine = [standings[t][lab] for t in present if lab in standings[t]]
        ranked = [s for s in mine if s.low is not None]
        row = {
            "label": lab,
            "reference": lab in references,
            "tasks": len(present),
            "ranked_tasks": len(ranked),
            "top_group_tasks": sum(s.top for s in ranked),
            "at_chance_tasks": sum(s.at_chance for s in mine),
            "avg_rank": float(np.mean([(s.low + s.high) / 2 for s in ranked])) if ranked else np.nan,
        }
        for m in HEADLINE:
            vals = [per[(t, lab, m)]["mean"] for t in present if per[(t, lab, m)]["n"] > 0]
            row[f"{m}_mean"] = float(np.mean(vals)) if vals else np.nan
        text = {
            "label": shown_label(lab, references),
            "tasks": f"{len(present)}/{len(tasks)}",
            "top group": (f"{row['top_group_tasks']} of {len(ranked)}" if ranked else DASH),
        }
        for t in tasks:
            s = standings[t].get(lab)
            row[f"{t}:accuracy_mean"] = per[(t, lab, "accuracy")]["mean"]
            row[f"{t}:accuracy_std"] = per[(t, lab, "accuracy")]["std"]
            row[f"{t}:accuracy_n"] = per[(t, lab, "accuracy")]["n"]
            row[f"{t}:rank"] = s.rank_text if s is not None else None
            row[f"{t}:top"] = bool(s is not None and s.top)
            shown = fmt_summary(per[(t, lab, "accuracy")])
            text[f"{t} accuracy"] = shown + (f" ({s.rank_text})" if s is not None and shown != DASH else "")
        rows.append(row)
        text_rows.append(text)
    data = pd.DataFrame(rows)
    if len(data):
        data["_order_top"], data["_order_mean"] = -data["top_group_tasks"], -data["accuracy_mean"].round(12)
        order = data.sort_values(
            ["reference", "_order_top", "avg_rank", "_order_mean", "label"], na_position="last"
        ).index  # within a tied group: by mean, for reading only
        data = data.drop(columns=["_order_top", "_order_mean"])
    else:
        order = data.index
    data, text = data.loc[order].reset_index(drop=True), pd.DataFrame(text_rows).loc[order].reset_index(drop=True)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    for t in tasks:
        marks = top_group_marks(standings[t], list(data["label"]))
        best[f"{t} accuracy"] = marks
    notes = [
        "Each task is ranked on its own (labels are compared only with labels measured on the same task and "
        "seeds); there is no average over tasks of different scales. tasks: how many tasks the label has; "
        "top group: on how many of its ranked tasks it is in the top group. Per-task cells: mean ± std over "
        "seeds (rank group). " + ranking_note()
    ]
    chance = sorted({f"{lab} on {t}" for t in tasks for lab, s in standings[t].items() if s.at_chance})
    if chance:
        notes.append("At chance (shown, not ranked): " + "; ".join(chance) + ".")
    unranked = [t for t in tasks if standings[t] and all(s.low is None for s in standings[t].values())]
    if unranked:
        notes.append(
            "No ranking is supported on " + ", ".join(unranked) + " (one seed, no shared seeds, or every "
            "label at chance)."
        )
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
    """Sentences for the top of a report from the leaderboard: per task, the top group, labels at chance, or
    that no ranking is supported."""
    data, out = leaderboard.data, []
    for column in [c for c in data.columns if c.endswith(":rank")]:
        task = column[: -len(":rank")]
        ranked = data[column].notna() & ~data["reference"].astype(bool)
        top = list(data.loc[ranked & data[f"{task}:top"].astype(bool), "label"])
        chance = list(data.loc[data[column] == "at chance", "label"])
        if top and len(top) == int((ranked & data[column].str.match(r"^\d").fillna(False)).sum()):
            out.append(f"{task}: no detectable difference among the ranked labels ({', '.join(top)}).")
        elif top:
            out.append(f"{task}: top group (no detectable difference among them): {', '.join(top)}.")
        elif ranked.any():
            why = sorted({str(v) for v in data.loc[ranked, column]})
            out.append(f"{task}: no ranking is supported ({'; '.join(why)}).")
        if chance:
            out.append(f"{task}: at chance (accuracy not above the majority class): {', '.join(chance)}.")
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
