"""Quality against cost, per task, with the uncertainty of both: the report section `quality_cost`.

For each task of a quality measurement (accuracy, recall, lm: its ranked headline metric, e.g. accuracy or bits per
byte), every cost the results hold for its labels: training time (the same cells' `train_seconds`), the decoding
state (`state_bytes`, or the decode measurement's at its longest context), decoding ms per token (the decode
measurement's at its longest context) and the attention's forward time (the efficiency measurement's at its
longest length). Each label is a point with the inference engine's interval on both axes. The front: the labels
no other label beats on both axes, where "beats" is the engine's verdict (ahead after the suite's correction) on
quality and on cost; a cost declared exact (a count: state bytes) is compared as counted, so a smaller state beats a
larger one outright (`attnbench.decisions.exact`). A label with one seed beats nothing and is beaten by nothing on a
measured axis: the front then says so.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.decisions.cells import cells_frame
from attnbench.decisions.settings import ComparisonSettings
from attnbench.metrics import headline_metric, metric_exact, metric_info
from attnbench.report import inference
from attnbench.report.load import Results
from attnbench.report.plot import Plot, legend_below, new_figure, save_plot
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.table import Table, slug
from attnbench.results import metric_names

QUALITY_MEASUREMENTS = ("accuracy", "recall", "lm")


@dataclasses.dataclass(frozen=True)
class Cost:
    """One cost axis: where its values come from (None: the quality cells themselves), the metric (a pattern with
    '@*' picks the longest length every label has) and its axis label."""

    name: str
    measurement: str | None
    metric: str
    axis: str


COSTS = (
    Cost("training time", None, "train_seconds", "training seconds (wall)"),
    Cost("state bytes", None, "state_bytes", "decoding state bytes per sequence and layer"),
    Cost("state bytes", "decode", "state_bytes@*", "decoding state bytes per sequence and layer"),
    Cost("decode ms/token", "decode", "decode_ms_per_token@*", "decode ms per token"),
    Cost("forward ms", "efficiency", "forward_ms@*", "attention forward ms"),
)


def _pick_metric(cells: pd.DataFrame, pattern: str, labels: set[str]) -> str | None:
    """`pattern` itself, or for 'name@*' the longest length whose metric every label of `labels` has."""
    names = metric_names(cells)
    if "@*" not in pattern:
        return pattern if pattern in names else None
    prefix = pattern[:-1]
    lengths = sorted(
        (int(n[len(prefix) :]) for n in names if re.fullmatch(re.escape(prefix) + r"\d+", n)), reverse=True
    )
    measured = labels & set(cells["label"])
    for length in lengths:
        name = f"{prefix}{length}"
        if measured <= {lab for lab, metrics in zip(cells["label"], cells["metrics"]) if name in (metrics or {})}:
            return name
    return None


def _cost_frame(
    results: Results, quality: pd.DataFrame, task: str, cost: Cost, labels: set[str]
) -> tuple[pd.DataFrame | None, str | None]:
    """The engine frame of one cost for the labels of a quality task (relabelled to that task), and its metric."""
    cells = quality if cost.measurement is None else results.of(cost.measurement)
    cells = cells[cells["label"].isin(labels)]
    metric = _pick_metric(cells, cost.metric, labels) if len(cells) else None
    if metric is None:
        return None, None
    frame = cells_frame(cells, metric)
    frame = frame[frame["metric"] == metric].assign(task=task)
    frame = frame.drop_duplicates(["label", "seed"])  # a cost measured once per label, whatever its task
    return (frame, metric) if len(frame) else (None, None)


def _beats(pairs: pd.DataFrame) -> set[tuple[str, str]]:
    """(winner, loser) of every pair whose verdict is ahead or behind."""
    out = set()
    for r in pairs.itertuples():
        if r.verdict == "ahead":
            out.add((r.label_a, r.label_b))
        elif r.verdict == "behind":
            out.add((r.label_b, r.label_a))
    return out


def quality_cost_rows(results: Results) -> pd.DataFrame:
    """One row per quality task, cost and label: quality and cost means with their intervals, and whether the label
    is on the front (no other label beats it on both axes) with the labels that do beat it."""
    rows = []
    references = results.reference_labels()
    for measurement in QUALITY_MEASUREMENTS:
        cells = results.of(measurement)
        cells = cells[~cells["label"].isin(references)]
        for task, quality in cells.groupby("task", sort=True):
            metric = headline_metric(metric_names(quality))
            if metric is None:
                continue
            settings = inference.run_settings(results)
            quality_standing = inference.label_standings(quality, metric)
            better = _beats(inference.pairs(quality, metric, settings))
            labels = set(quality_standing.table["label"])
            for cost in COSTS:
                frame, cost_metric = _cost_frame(results, quality, str(task), cost, labels)
                if frame is None or any(r["cost"] == cost.name and r["task"] == task for r in rows):
                    continue
                rows += _cost_rows(str(task), metric, quality_standing, better, cost, cost_metric, frame, settings)
    return pd.DataFrame(rows)


def _cost_rows(
    task: str,
    metric: str,
    quality_standing: inference.Standings,
    better: set[tuple[str, str]],
    cost: Cost,
    cost_metric: str,
    frame: pd.DataFrame,
    settings: ComparisonSettings,
) -> list[dict]:
    """The rows of one task and cost (see `quality_cost_rows`)."""
    cost_standing = inference.frame_standings(frame, cost_metric)
    cheaper = _beats(inference.frame_pairs(frame, cost_metric, settings))
    rows = []
    for label in sorted(set(quality_standing.table["label"]) & set(cost_standing.table["label"])):
        q, c = quality_standing.get(label), cost_standing.get(label)
        beaten_by = sorted(
            m for m in set(cost_standing.table["label"]) if (m, label) in better and (m, label) in cheaper
        )
        rows.append(
            {
                "task": task,
                "quality": metric,
                "cost": cost.name,
                "cost_metric": cost_metric,
                "label": label,
                "quality_mean": q["mean"],
                "quality_low": q["low"],
                "quality_high": q["high"],
                "quality_seeds": q["n_seeds"],
                "cost_mean": c["mean"],
                "cost_low": c["low"],
                "cost_high": c["high"],
                "cost_seeds": c["n_seeds"],
                "front": not beaten_by,
                "beaten_by": ", ".join(beaten_by) or np.nan,
                "counted": metric_exact(cost_metric),
                "axis": cost.axis,
            }
        )
    return rows


def quality_cost_table(results: Results) -> Table | None:
    """Per task and cost: each label's quality and cost with intervals, on the front or beaten (and by whom)."""
    data = quality_cost_rows(results)
    if data.empty:
        return None
    text = pd.DataFrame(
        [
            {
                "task": r.task,
                "cost": r.cost,
                "label": r.label,
                r.quality if data["quality"].nunique() == 1 else "quality": inference.interval_text(
                    r.quality_mean, r.quality_low, r.quality_high
                ),
                "cost value": inference.exact_text(r.cost_metric, r.cost_mean)
                if r.counted
                else inference.interval_text(r.cost_mean, r.cost_low, r.cost_high),
                "front": "yes" if r.front else f"no: beaten by {r.beaten_by}",
            }
            for r in data.itertuples()
        ]
    )
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    best["front"] = data["front"].to_numpy()
    settings = inference.run_settings(results)
    notes = [
        "Quality against each cost the results hold, per task: mean [95% interval] on both axes (inference engine). "
        "Front: the labels no other label beats on both axes, a beat being the engine's verdict (ahead after "
        f"{inference.correction_text(settings.correction)} over the task's pairs, at each metric's margin) on "
        "quality and on cost; state bytes are counted, not estimated: a smaller state beats a larger one outright. "
        "A label beaten on neither axis by any one label stays on the front: with few seeds the front is wide, "
        "which says that the seeds cannot tell, not that the labels are alike. Costs measured in another "
        "measurement (decode, efficiency) are taken at its longest length every label has."
    ]
    return Table("quality_cost", "Quality against cost, per task", data, text, best, notes, key_columns=3)


def plot_quality_cost(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Per task: one panel per cost, quality against cost with both intervals, the front ringed in black."""
    table = context.tables.get("quality_cost")
    if table is None:
        return []
    data, plots = table.data, []
    for task, part in data.groupby("task", sort=True):
        costs = list(dict.fromkeys(part["cost"]))
        fig = new_figure(3.6 * len(costs) + 0.8, 3.6)
        axes = np.atleast_1d(fig.subplots(1, len(costs), sharey=True))
        for ax, cost in zip(axes, costs):
            mine = part[part["cost"] == cost]
            for r in mine.itertuples():
                color = context.colors.get(r.label)
                xerr = _err(r.cost_mean, r.cost_low, r.cost_high)
                yerr = _err(r.quality_mean, r.quality_low, r.quality_high)
                ax.errorbar(r.cost_mean, r.quality_mean, xerr=xerr, yerr=yerr, fmt="o", ms=4, color=color,
                            label=r.label, capsize=2, lw=0.8)  # fmt: skip
                if r.front:
                    ax.scatter(r.cost_mean, r.quality_mean, s=110, facecolors="none", edgecolors="black", zorder=5)
            if (mine["cost_mean"] > 0).all():
                ax.set_xscale("log")
            ax.set_xlabel(mine["axis"].iloc[0])
            ax.set_title(cost, fontsize="small")
            ax.grid(True, which="both", alpha=0.3)
        quality = part["quality"].iloc[0]
        better = "higher" if (metric_info(quality) and metric_info(quality).direction == "max") else "lower"
        axes[0].set_ylabel(f"{quality} ({better} is better)")
        title = f"Quality against cost, task {task} (ringed: the front by the engine's verdicts)"
        fig.suptitle(title, fontsize="medium")
        legend_below(fig, axes)
        plots.append(save_plot(fig, out_dir, f"quality_cost_{slug(task)}", title))
    return plots


def _err(mean: float, low: float, high: float) -> np.ndarray | None:
    """Errorbar extents (2, 1) from an interval; None where there is none."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return None
    return np.array([[max(mean - low, 0.0)], [max(high - mean, 0.0)]])


def quality_cost_summary(context: ReportContext) -> list[str]:
    """Per task and cost where the front leaves some label out: the labels on it."""
    table = context.tables.get("quality_cost")
    if table is None:
        return []
    out = []
    for (task, cost), part in table.data.groupby(["task", "cost"], sort=True):
        front = list(part.loc[part["front"], "label"])
        if len(front) < len(part):
            out.append(f"{task}, quality against {cost}: the front (no label beats them on both): {', '.join(front)}.")
    return out


register_report_section(
    "quality_cost",
    order=95,
    plot_order=4,  # the one picture to look at first
    tables=lambda results: [quality_cost_table(results)],
    plots=plot_quality_cost,
    summary=quality_cost_summary,
)
