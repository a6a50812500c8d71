"""Report section `niah`: exact match against needle depth and context length (RULER's heat map), from the recall
measurement's scores per group of test rows (details['groups'], tagged context_length and depth by the niah task).

- `depth_tables`: per task, exact match per label and context length (rows) at each depth (columns), mean over
  seeds.
- `plot_depth_heatmaps`: per task, a panel per label: depth (rows) x context length (columns), exact match.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.report.load import Results
from attnbench.report.plot import Plot, new_figure, save_plot
from attnbench.report.sections import ReportContext, register_report_section
from attnbench.report.table import Table, fmt

TAGS = ("context_length", "depth")


def depth_points(results: Results) -> pd.DataFrame:
    """Per ok recall cell and group of test rows tagged with a context length and a depth: task, label, seed,
    context_length, depth, rows, exact_match, accuracy."""
    columns = ["task", "label", "seed", *TAGS, "rows", "exact_match", "accuracy"]
    rows = [
        {"task": c["task"], "label": c["label"], "seed": c["seed"], **{k: g.get(k) for k in columns[3:]}}
        for _, c in results.of("recall").iterrows()
        for g in (c["details"] or {}).get("groups") or []
        if all(tag in g for tag in TAGS)
    ]
    return pd.DataFrame(rows, columns=columns)


def depth_table(task: str, points: pd.DataFrame) -> Table:
    """Exact match per (label, context length) at each depth, mean over seeds, for one task."""
    part = points[points["task"] == task]
    means = part.groupby(["label", "context_length", "depth"], as_index=False)["exact_match"].mean()
    depths = sorted(means["depth"].unique())
    data, text = [], []
    for (label, length), mine in means.groupby(["label", "context_length"], sort=True):
        rec = {"label": label, "context length": int(length)}
        row = dict(rec)
        for d in depths:
            value = mine.loc[mine["depth"] == d, "exact_match"]
            rec[f"depth {d:g}"] = float(value.iloc[0]) if len(value) else np.nan
            row[f"depth {d:g}"] = fmt(rec[f"depth {d:g}"])
        data.append(rec)
        text.append(row)
    seeds = part.groupby("label")["seed"].nunique()
    notes = [
        (
            "Exact match of the answers (every token of the value right) on the test rows whose asked needle "
            "stands at that depth (0: before the whole haystack, 1: after it, just before the question), mean over "
            f"{int(seeds.min())}-{int(seeds.max())} seeds; RULER's heat map as a table. Not ranked: the task's own "
            "table ranks exact match over all its test rows."
        )
    ]
    text = pd.DataFrame(text)
    best = pd.DataFrame(False, index=text.index, columns=text.columns)
    return Table(f"niah_depth_{task}", f"Needle depth x context length: {task}", pd.DataFrame(data), text, best, notes,
                 key_columns=2)  # fmt: skip


def depth_tables(results: Results) -> list[Table]:
    """One depth x length table per task whose recall cells hold rows tagged with both."""
    points = depth_points(results)
    return [depth_table(task, points) for task in sorted(points["task"].unique())]


def plot_depth_heatmaps(context: ReportContext, out_dir: Path) -> list[Plot]:
    """Per task, a heat map per label: exact match at each depth (rows) and context length (columns)."""
    points = depth_points(context.results)
    plots = []
    for task in sorted(points["task"].unique()):
        part = points[points["task"] == task]
        means = part.groupby(["label", "depth", "context_length"])["exact_match"].mean()
        labels = sorted(part["label"].unique())
        depths, lengths = sorted(part["depth"].unique()), sorted(part["context_length"].unique())
        columns = min(4, len(labels))
        grid_rows = -(-len(labels) // columns)
        fig = new_figure(2.4 * columns + 0.8, 2.2 * grid_rows + 0.4)
        axes = np.atleast_1d(fig.subplots(grid_rows, columns, squeeze=False)).ravel()
        image = None
        for ax, label in zip(axes, labels):
            grid = np.array([[means.get((label, d, n), np.nan) for n in lengths] for d in depths])
            image = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="upper")
            ax.set_title(label, fontsize="small")
            ax.set_xticks(range(len(lengths)), [str(int(n)) for n in lengths], fontsize="x-small")
            ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize="x-small")
            ax.set_xlabel("context length", fontsize="x-small")
            ax.set_ylabel("depth", fontsize="x-small")
        for ax in axes[len(labels) :]:
            ax.set_visible(False)
        if image is not None:
            fig.colorbar(image, ax=list(axes[: len(labels)]), shrink=0.8, label="exact match")
        plots.append(save_plot(fig, out_dir, f"niah_depth_{task}", f"Exact match against depth and length: {task}"))
    return plots


register_report_section("niah", order=88, tables=depth_tables, plots=plot_depth_heatmaps)
