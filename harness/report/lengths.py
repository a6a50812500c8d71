"""Report section `lengths`: accuracy (or bits per byte) against test length, from the metrics `accuracy@<length>`
and `bits_per_byte@<length>` a cell reports for its task's test splits at other lengths
(attnbench.measurements.lengths), whatever measurement scored them.

- `length_table`: per task and metric, the metric per label (rows) at each test length (columns), mean ± std over
  seeds, and the longest training length the task's provenance names; the inference engine's intervals and ranks
  of each `<metric>@<length>` are in the task's own table (every metric with a direction is ranked there).
- `plot_lengths`: the metric against length (log axis), a panel per task, a line per label, the training length
  marked; one figure per metric.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.names import split_metric_name
from attnbench.report.load import Results
from attnbench.report.plot import Plot, legend_below, new_figure, save_plot
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.stats import summarize
from attnbench.report.table import Table, fmt_summary

METRICS = {"accuracy": "accuracy", "bits_per_byte": "bits per byte"}  # metric -> its name in titles and axes


def length_points(results: Results, metric: str = "accuracy") -> pd.DataFrame:
    """One row per ok cell and test length: task, label, seed, length, value (of `metric`@length), train_length
    (the longest training row, from the cell's data provenance, NaN where it is not recorded)."""
    rows = []
    for _, cell in results.ok.iterrows():
        train_length = _train_length(cell)
        for name, value in (cell["metrics"] or {}).items():
            parsed = split_metric_name(name)
            if parsed is not None and parsed[0] == metric:
                rows.append(
                    {
                        "task": cell["task"],
                        "label": cell["label"],
                        "seed": cell["seed"],
                        "length": parsed[1],
                        "value": value,
                        "train_length": train_length,
                    }
                )
    return pd.DataFrame(rows, columns=["task", "label", "seed", "length", "value", "train_length"])


def _train_length(cell: pd.Series) -> float:
    """The longest training row of a cell's task (its data provenance's max_length), NaN if not recorded."""
    data = (cell.get("provenance") or {}).get("data") or {}
    return float(data.get("max_length", np.nan))


def length_table(results: Results, task: str, points: pd.DataFrame, metric: str = "accuracy") -> Table:
    """`metric` per label (rows) at each test length (columns) of one task."""
    part = points[points["task"] == task]
    lengths = sorted(part["length"].unique())
    data, text = [], []
    for label, mine in part.groupby("label", sort=True):
        rec, row = {"label": label}, {"label": label}
        for n in lengths:
            s = summarize(mine.loc[mine["length"] == n, "value"])
            rec[f"{metric}@{n}"], row[f"@{n}"] = s["mean"], fmt_summary(s)
        data.append(rec)
        text.append(row)
    trained = part["train_length"].dropna()
    where = f" (trained on rows up to {int(trained.max())} tokens)" if len(trained) else ""
    notes = [
        (
            f"{METRICS[metric].capitalize()} on test rows of each length{where}, mean ± std over seeds. Longer "
            "than the training rows, a model meets positions it was never trained on (with learned absolute "
            "positions, their embeddings are still at their initial values; rope and none have no table). The "
            "intervals and ranks of each column (inference engine) are in the task's own table (metric "
            f"{metric}@<length>)."
        )
    ]
    text = pd.DataFrame(text)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    name = f"lengths_{task}" if metric == "accuracy" else f"lengths_{metric}_{task}"
    title = f"{METRICS[metric].capitalize()} against test length: {task}"
    return Table(name, title, pd.DataFrame(data), text, best, notes)


def length_tables(results: Results) -> list[Table]:
    """One table per task and metric whose cells report <metric>@<length> (accuracy, bits per byte)."""
    tables = []
    for metric in METRICS:
        points = length_points(results, metric)
        tables += [length_table(results, task, points, metric) for task in sorted(points["task"].unique())]
    return tables


def plot_lengths(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Each metric against test length (log), a panel per task, a line per label (mean over seeds)."""
    return [plot for metric in METRICS for plot in _plot_metric(context, out_dir, metric)]


def _plot_metric(context: ReportContext, out_dir: Path, metric: str) -> list[Plot]:
    """One figure: `metric` against test length, a panel per task."""
    points = length_points(context.results, metric)
    if points.empty:
        return []
    tasks = sorted(points["task"].unique())
    fig = new_figure(3.2 * len(tasks), 3.2)
    axes = np.atleast_1d(fig.subplots(1, len(tasks), sharey=True))
    for ax, task in zip(axes, tasks):
        part = points[points["task"] == task]
        means = part.groupby(["label", "length"], as_index=False)["value"].mean()
        for label, mine in means.groupby("label", sort=True):
            ax.plot(mine["length"], mine["value"], marker="o", label=label, color=context.colors.get(label))
        trained = part["train_length"].dropna()
        if len(trained):
            ax.axvline(trained.max(), color="grey", linewidth=0.6, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_title(task, fontsize="small")
        ax.set_xlabel("test length (tokens)")
    axes[0].set_ylabel(f"{METRICS[metric]} (mean over seeds)")
    legend_below(fig, axes)
    return [save_plot(fig, out_dir, f"{metric}_vs_length", f"{METRICS[metric].capitalize()} against test length")]


register_report_section("lengths", order=87, tables=length_tables, plots=plot_lengths)
