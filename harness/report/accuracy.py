"""The accuracy sections: the leaderboard and one table per task, with the reliability diagrams and the headline
sentences; and (after the LRA table) the paired comparisons, the published values and the sweep's chosen trials."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from attnbench.report.load import Results, metric_frame
from attnbench.report.paired import paired_comparison_table
from attnbench.report.plot import Plot, new_figure, save_plot
from attnbench.report.published import published_table
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.sweep import sweep_table
from attnbench.report.table import Table, slug
from attnbench.report.tables import headline_summary, leaderboard_table, task_table


def accuracy_tables(results: Results) -> list[Table]:
    """The leaderboard across tasks (where there are accuracy cells), then one table per task."""
    tasks = sorted(set(results.cells.loc[results.cells["measurement"] == "accuracy", "task"].dropna()))
    return [leaderboard_table(results), *(task_table(results, t) for t in tasks)] if tasks else []


def accuracy_summary(context: ReportContext) -> list[str]:
    """Per task: the best set, the labels at chance, or that no label is detectably better (from the leaderboard)."""
    leaderboard = context.tables.get("leaderboard")
    return headline_summary(leaderboard) if leaderboard is not None else []


def _pooled_bins(bin_lists: list[list[dict]]) -> pd.DataFrame:
    """Reliability bins pooled over seeds: counts summed, confidence and accuracy count-weighted."""
    rows = pd.DataFrame([b for bins in bin_lists for b in bins])
    if rows.empty:
        return rows
    rows = rows[rows["count"] > 0]
    rows = rows.assign(conf_w=rows["confidence"] * rows["count"], acc_w=rows["accuracy"] * rows["count"])
    g = rows.groupby(["lower", "upper"], as_index=False)[["count", "conf_w", "acc_w"]].sum()
    return g.assign(confidence=g["conf_w"] / g["count"], accuracy=g["acc_w"] / g["count"])


def plot_reliability(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Per task: a grid of reliability diagrams, one panel per label, bins pooled over seeds."""
    results, colors = context.results, context.colors
    cells = results.of("accuracy")
    metrics = metric_frame(results, "accuracy")
    plots = []
    for task, part in cells.groupby("task", sort=True):
        labels = sorted(lab for lab, c in part.groupby("label") if any(d.get("reliability") for d in c["details"]))
        if not labels:
            continue
        ncols = min(3, len(labels))
        nrows = math.ceil(len(labels) / ncols)
        fig = new_figure(3.0 * ncols, 3.0 * nrows)
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
        for ax, label in zip(axes, labels):
            bins = _pooled_bins([d.get("reliability") or [] for d in part[part["label"] == label]["details"]])
            ax.plot([0, 1], [0, 1], "--", color="gray", lw=1)
            if not bins.empty:
                ax.bar(
                    (bins["lower"] + bins["upper"]) / 2,
                    bins["accuracy"],
                    width=bins["upper"] - bins["lower"],
                    color=colors[label],
                    edgecolor="black",
                    lw=0.4,
                    alpha=0.85,
                )
            ece = metrics[(metrics["task"] == task) & (metrics["label"] == label) & (metrics["metric"] == "ece")]
            ece_text = f" (ECE {ece['value'].mean():.3f})" if len(ece) else ""
            ax.set_title(f"{label}{ece_text}", fontsize="small")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_xlabel("confidence")
            ax.set_ylabel("accuracy")
        for ax in axes[len(labels) :]:
            ax.set_visible(False)
        title = f"Reliability diagrams, task {task} (dashed: perfect calibration)"
        fig.suptitle(title)
        plots.append(save_plot(fig, out_dir, f"reliability_{slug(task)}", title))
    return plots


def comparison_tables(results: Results) -> list[Table | None]:
    """The paired comparisons, ours beside the published values, and each label's chosen sweep trial."""
    return [paired_comparison_table(results), published_table(results), sweep_table(results.sweep)]


register_report_section(
    "accuracy",
    order=10,
    tables=accuracy_tables,
    plots=plot_reliability,
    summary=accuracy_summary,
    measurements=("accuracy",),
)
register_report_section("comparisons", order=30, tables=comparison_tables)
